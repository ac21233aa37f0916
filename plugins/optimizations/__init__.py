"""Built-in optimization plugins: each turns knobs on a loaded model (workstation.models.Knobs)."""
