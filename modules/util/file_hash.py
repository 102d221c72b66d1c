"""The one content hash of a file: sha256 of its bytes (base LoRAs in headers and resume fingerprints, backups)."""
from __future__ import annotations

import hashlib
import os


def file_sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of the file's bytes, read in chunks (a multi-GiB file never sits in memory whole)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
