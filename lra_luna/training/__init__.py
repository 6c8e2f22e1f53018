"""Training: the loop, its steps and state, checkpoints, metrics and the run folder."""
