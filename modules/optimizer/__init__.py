"""Optimizers as pluggable parts: one `OptimizerSpec` per optimizer (its typed options, how to build it, what
it needs installed) and one plain dict of them in `registry.py`. Adding one is its module + a registry line."""
