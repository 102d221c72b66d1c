"""Adapter types (LoRA, DoRA, LoHa, LoKr) as pluggable parts: see `spec.AdapterSpec` and `registry.ADAPTERS`."""
