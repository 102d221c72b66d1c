"""torch on one CPU thread for a block, the previous count restored after: tiny models gain nothing from threads
(two threads on a busy 2-core machine wait on each other), and runs compared bit for bit, or against thresholds
measured on one thread, must sum in the same order."""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def one_torch_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
