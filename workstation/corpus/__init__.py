"""Corpus-scale extraction on Ray (`launcher.py corpus`): the runner, its output layout, the work Ray runs."""
