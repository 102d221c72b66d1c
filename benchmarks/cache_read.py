#!/usr/bin/env python
"""Cost of the cache checksum: DiskCache reads of full-size latent entries with and without verifying.

Each entry holds what the plain loader caches for one 832×480×81 clip of Wan 2.1 (posterior mean and
std, 16 × 21 × 60 × 104 float32 each, 16.8 MB together) plus a 512 × 4096 bf16 text embedding. The
files are read back from the page cache, so this is the worst case for the checksum's share (a cold
read from disk is slower and the checksum's share smaller).

    python benchmarks/cache_read.py [--entries 8] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import torch

    from safetensors.torch import load as load_safetensors

    from modules.dataLoader.cache import DiskCache, fingerprint, tensor_checksum

    generator = torch.Generator().manual_seed(0)
    entry = {"latent_mean": torch.randn(16, 21, 60, 104, generator=generator),
             "latent_std": torch.rand(16, 21, 60, 104, generator=generator),
             "prompt_embeds": torch.randn(512, 4096, generator=generator).bfloat16()}
    megabytes = sum(t.numel() * t.element_size() for t in entry.values()) / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        cache = DiskCache(tmp)
        keys = [fingerprint("entry", i) for i in range(args.entries)]
        for key in keys:
            cache.put(key, entry)

        def read_rate() -> float:
            best = 0.0
            for _ in range(args.repeats):
                start = time.perf_counter()
                for key in keys:
                    assert cache.get(key) is not None
                best = max(best, len(keys) / (time.perf_counter() - start))
            return best

        verified = read_rate()
        original_get = DiskCache.get_with_metadata

        def unverified(self, key):  # the same read without the checksum comparison
            return load_safetensors(self.path_for(key).read_bytes()), {}

        DiskCache.get_with_metadata = unverified
        try:
            plain = read_rate()
        finally:
            DiskCache.get_with_metadata = original_get
        start = time.perf_counter()
        for _ in range(args.repeats):
            tensor_checksum(entry)
        checksum_ms = (time.perf_counter() - start) / args.repeats * 1000
    print(json.dumps({"entry_mb": round(megabytes, 1), "reads_per_s_verified": round(verified, 1),
                      "reads_per_s_unverified": round(plain, 1), "checksum_ms_per_entry": round(checksum_ms, 1),
                      "verified_mb_per_s": round(verified * megabytes, 0)}, indent=2))


if __name__ == "__main__":
    main()
