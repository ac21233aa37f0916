"""Quality tools over stored runs: agreement with gold or another run, the review queue, per-type thresholds."""
