"""Helpers for model plugins that run torch networks: reading checkpoints strictly, keeping fp32 weights across a
precision switch, recognising an out-of-memory error. Importing anything here imports torch, so `contracts` itself
never does: a plugin that needs no network (rules, dictionaries) imports `contracts` without paying for torch."""
