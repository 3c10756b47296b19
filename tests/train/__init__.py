"""Tests of mlmtrain.train: the loop, the step, resume, checkpoints, torchrun, budgets, trackers."""
