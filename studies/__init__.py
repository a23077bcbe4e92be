"""Attend's studies: what measures a model's behaviour (its heads, attention sinks and streaming,
attention distance, interventions), each one command writing JSON and a figure."""
