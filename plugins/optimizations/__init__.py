"""Built-in optimization plugins: each turns knobs on a loaded model (contracts.model.Knobs)."""
