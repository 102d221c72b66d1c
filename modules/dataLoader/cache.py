"""A disk cache of tensor dicts (safetensors files) keyed by content fingerprints."""

import dataclasses
import enum
import errno
import hashlib
import json
import logging
import os
import re
import struct
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from modules.util.atomic import atomic_path
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_-]{2,200}$")
_EDGE_BYTES = 1 << 20  # 1 MiB


def _canonical(value: Any) -> Any:
    """JSON fallback for paths, enums, dataclasses, sets and bytes."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"cannot fingerprint a {type(value).__name__}")


def fingerprint(*parts: Any) -> str:
    """sha256 hex over a canonical JSON (sorted keys, no spaces) of the parts."""
    text = json.dumps(list(parts), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_canonical)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_fingerprint(path: str | os.PathLike) -> str:
    """sha256 hex over size, mtime_ns and the first and last 1 MiB of a file (cheap for big videos)."""
    stat = os.stat(path)
    digest = hashlib.sha256(f"{stat.st_size}:{stat.st_mtime_ns}:".encode())
    with open(path, "rb") as f:
        digest.update(f.read(_EDGE_BYTES))
        if stat.st_size > _EDGE_BYTES:
            f.seek(max(_EDGE_BYTES, stat.st_size - _EDGE_BYTES))
            digest.update(f.read(_EDGE_BYTES))
    return digest.hexdigest()


CHECKSUM_KEY = "wantrainer.sha256"


def tensor_checksum(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over names, dtypes, shapes and raw bytes of CPU tensors: damage that leaves the file's
    header and length intact (a flipped bit on disk, a torn page) still changes it."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}:".encode())
        if tensor.numel():
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def _read_metadata(data: bytes) -> dict[str, str]:
    """The `__metadata__` of a safetensors blob (already known to load)."""
    (header_size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_size])
    return dict(header.get("__metadata__") or {})


class DiskCache:
    """Tensor dicts stored as `root/<key[:2]>/<key>.safetensors`, written atomically.

    Corrupt files (unreadable, or whose tensors no longer match the checksum written with them) are
    logged, deleted and reported as a miss, so the caller encodes the sample again. A write that fails (disk full, no permission)
    raises a one-line `UserError` naming the cache folder and leaves no partial file.
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def path_for(self, key: str) -> Path:
        """The file that holds `key`."""
        if not _KEY_PATTERN.match(key):
            raise ValueError(f"cache key must be 2-200 characters of [A-Za-z0-9_-], got {key!r}")
        return self.root / key[:2] / f"{key}.safetensors"

    def __contains__(self, key: str) -> bool:
        return self.path_for(key).is_file()

    def put(self, key: str, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
        """Store `tensors` (copied to contiguous CPU tensors) with string `metadata` under `key`."""
        path = self.path_for(key)
        cpu = {name: t.detach().to("cpu").contiguous().clone() for name, t in tensors.items()}
        meta = {str(k): str(v) for k, v in (metadata or {}).items()}
        meta[CHECKSUM_KEY] = tensor_checksum(cpu)
        data = save_safetensors(cpu, metadata=meta)  # written from Python: a full disk raises OSError(ENOSPC)
        try:
            with atomic_path(path) as temp:
                temp.write_bytes(data)
        except OSError as e:  # the temp file is gone; entries written before stay valid
            if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
                raise UserError(f"no space left for the cache folder '{self.root}': free some space there, set "
                                "cache_dir to a disk with room, or set latent_caching to false") from None
            raise UserError(f"cannot write to the cache folder '{self.root}' ({e.strerror or e}): make it writable, "
                            "set cache_dir to another folder, or set latent_caching to false") from None

    def get(self, key: str) -> dict[str, torch.Tensor] | None:
        """The tensors under `key`, or None when absent or corrupt (corrupt files are deleted)."""
        entry = self.get_with_metadata(key)
        return None if entry is None else entry[0]

    def get_with_metadata(self, key: str) -> tuple[dict[str, torch.Tensor], dict[str, str]] | None:
        """(tensors, metadata) under `key`, or None when absent or corrupt (corrupt files are deleted)."""
        path = self.path_for(key)
        try:
            data = path.read_bytes()  # read fully: no open handle or mmap left (Windows can replace it)
        except FileNotFoundError:
            return None
        try:
            tensors = load_safetensors(data)
            metadata = _read_metadata(data)
            checksum = metadata.pop(CHECKSUM_KEY, None)  # entries from before checksums have none
            if checksum is not None and checksum != tensor_checksum(tensors):
                raise ValueError("its tensors do not match their checksum")
        except Exception as e:  # safetensors raises its own error types for every kind of damage
            logger.warning("cache file %s is corrupt (%s: %s); deleting it", path, type(e).__name__, e)
            path.unlink(missing_ok=True)
            return None
        return tensors, metadata

    def delete(self, key: str) -> None:
        """Remove the entry for `key` if present."""
        self.path_for(key).unlink(missing_ok=True)


def component_fingerprint(folder: Path) -> str:
    """Identity of a model component without hashing gigabytes: its config plus each file's size and mtime
    (a folder's files, or a single-file component's one file)."""
    if folder.is_file():
        stat = folder.stat()
        return fingerprint([(folder.name, stat.st_size, stat.st_mtime_ns)])
    parts = []
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            stat = path.stat()
            parts.append((path.relative_to(folder).as_posix(), stat.st_size, stat.st_mtime_ns))
    return fingerprint(parts)
