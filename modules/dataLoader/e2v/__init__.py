"""Elements-to-Video data: element discovery, per-element preprocessing and the conditioning layout
(docs/e2v.md). Everything here is model-free and pure."""
