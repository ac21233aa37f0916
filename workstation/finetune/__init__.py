"""Fine-tuning: the trainer (`launcher.py finetune`), its events file, and the runs the UI starts and follows."""
