"""Training: the loop, its state, checkpoints, validation and logs."""
