"""Training: length, optimizer and learning rate, σ sampling, checkpointing, the Wan 2.2 expert."""
from __future__ import annotations

from modules.ui.views.base_tab import BaseTab


class TrainingTab(BaseTab):
    name = "training"
