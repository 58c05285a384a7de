"""Training: losses, data, miners and the trainer shared by every method's recipe."""
