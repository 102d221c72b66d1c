"""Data preparation: raw footage to a training set (clips, captions, E2V element images, masks).

Above dataLoader and config (it reads media and dataset configs the way training does), below the GUI; it imports
no trainer code (docs/architecture.md, Layers)."""
