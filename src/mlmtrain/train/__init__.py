"""Pretraining: the loop, one optimizer step, the objectives (one class each), precision, checkpoints and their
model card, the run folder's guard, starting from an existing model."""
