"""Tests of mlmtrain.evaluate: perplexity and the probe."""
