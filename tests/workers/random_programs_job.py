"""Runs the random programs of seeds [--first, --first + --count) (tests/support/
random_programs.py) with jax_jaccl.lax (or, with --module lax, with jax.lax: XLA's own
collectives, on whatever carries them in this job; the programs drawn with one_order) over the
job's devices and saves what this process got in --out/<seed>-<process>.npz: its blocks of the
result, or the error it raised. The test compares them with jax.lax's in-process answers."""

from __future__ import annotations

import os

from common import start

args, index, count = start(__doc__, {"--first": dict(type=int), "--count": dict(type=int),
                                     "--out": dict(), "--module": dict(default="jaccl")})

import jax  # noqa: E402
import numpy as np  # noqa: E402

from jax_jaccl import lax as jlax  # noqa: E402

module = jax.lax if args.module == "lax" else jlax
from random_programs import draw, outcome  # noqa: E402

for seed in range(args.first, args.first + args.count):
    kind, got = outcome(draw(seed, jax.devices(), one_order=args.module == "lax"), module)
    path = os.path.join(args.out, f"{seed}-{index}.npz")
    if kind == "raised":
        np.savez(path, raised=np.array(f"{type(got).__name__}: {got}"))
        continue
    arrays = {}
    for k, (block, values) in enumerate(sorted(got.items())):
        arrays[f"index{k}"] = np.array(block, np.int64)
        # bytes and dtype name: npz has no bfloat16
        arrays[f"bytes{k}"] = np.ascontiguousarray(values).view(np.uint8).reshape(-1)
        arrays[f"dtype{k}"] = np.array(values.dtype.name)
        arrays[f"shape{k}"] = np.array(values.shape, np.int64)
    np.savez(path, **arrays)
print(f"DONE {args.count}", flush=True)
