"""Tests of scripts/: each script's quick mode on the CPU."""
