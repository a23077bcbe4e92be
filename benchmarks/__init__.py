"""Attend's benchmarks: each times Attend against a peer in the same run (see README.md), the
same way in all (`benchmarks.timing`)."""
