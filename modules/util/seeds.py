"""Seeds derived from names and numbers, the same in every process, platform and resume."""
from __future__ import annotations

import hashlib
import json


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any JSON-able parts (stable across processes, platforms and resumes)."""
    digest = hashlib.sha256(json.dumps(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)
