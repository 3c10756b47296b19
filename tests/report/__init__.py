"""Tests of mlmtrain.report: pages from real runs, the health checks."""
