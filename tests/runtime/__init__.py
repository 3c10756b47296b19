"""Tests of mlmtrain.runtime: what may be deleted, durability, progress lines, error lines."""
