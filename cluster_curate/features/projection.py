"""Seeded Gaussian random projections (Johnson–Lindenstrauss).

A matrix P of shape [d_in, d_out] with entries N(0, 1/d_out) satisfies E[<xP, yP>] = <x, y>, so inner
products, norms and (approximately, for d_out in the hundreds or more) cosines survive the reduction. It is
used by `--dim` on the `gradient` and `hidden` features and, factor by factor, by `lora-gradient`.

The matrix is drawn on the CPU from a `torch.Generator` seeded with `seed`, so it is bit-identical on every
machine, process and device (GPU generators differ between devices); move it to the device afterwards.
"""

from __future__ import annotations

import numpy as np
import torch


def random_projection_torch(d_in: int, d_out: int, seed: int) -> torch.Tensor:
    """[d_in, d_out] float32 CPU tensor with entries N(0, 1/d_out), a pure function of (d_in, d_out, seed)."""
    if d_in < 1 or d_out < 1:
        raise ValueError(f"projection dimensions must be positive, got {d_in} -> {d_out}")
    gen = torch.Generator(device="cpu").manual_seed(int(seed) & 0x7FFF_FFFF_FFFF_FFFF)
    return torch.randn(d_in, d_out, generator=gen, dtype=torch.float32) / float(np.sqrt(d_out))


def random_projection(d_in: int, d_out: int, seed: int) -> np.ndarray:
    """[d_in, d_out] float32 array with entries N(0, 1/d_out); same values as `random_projection_torch`."""
    return random_projection_torch(d_in, d_out, seed).numpy()


def derive_seed(seed: int, *parts: object) -> int:
    """A stable sub-seed for one named use of `seed` (e.g. one layer's input side), independent of Python's
    per-process hash randomisation, so every process draws the same matrices."""
    import zlib
    key = "/".join(str(p) for p in (seed, *parts)).encode()
    return zlib.crc32(key) | (int(seed) % 2**31) << 32
