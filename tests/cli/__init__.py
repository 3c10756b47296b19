"""Tests of the commands, the config, the Python API and the one-line answers to bad inputs."""
