"""Attend's benchmarks: what times or sizes Attend against a peer or a baseline in the same run
(see README.md), timed the same way in all (`benchmarks.timing`). What a model does (its heads,
sinks, attention distance, interventions) is measured in `studies/`."""
