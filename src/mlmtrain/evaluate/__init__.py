"""Judging a model: masked-LM perplexity with fixed masks, and the downstream probe on a labeled task."""
