"""``tpo.optim``: optimizers whose state is a recurrence over the iteration dim."""
from tempo.optim.optimizers import SGD, Adam, AdamW, Optimizer, clip_by_global_norm

__all__ = ["Adam", "AdamW", "Optimizer", "SGD", "clip_by_global_norm"]
