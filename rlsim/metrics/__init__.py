"""Metrics: summaries computed from a simulation's recorder, and their cost in dollars.

Every metric is defined, with its formula and unit, in docs/metrics.md.
"""
