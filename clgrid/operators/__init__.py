"""The W-projection operators: `Gridder` and `Degridder` over the strategies, with the
checks of what they return and deterministic accumulation."""
