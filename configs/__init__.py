"""Experiment configs: one get_config(arg=None) per file; docstrings hold the commands."""
