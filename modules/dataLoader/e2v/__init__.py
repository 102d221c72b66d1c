"""Elements-to-Video data: element discovery, per-element preprocessing and the conditioning layout
(E2V_SPEC.md). Everything here is model-free and pure."""
