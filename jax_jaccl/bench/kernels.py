"""jaccl-bench kernels: the CUDA reduction and MoE combine kernels against the device's copy
bandwidth, measured in the same run, and the combine against XLA's own fused jnp version.

Bandwidth counts bytes read plus bytes written: a copy of S bytes moves 2S; an n-operand
reduction (n+1)S; the combine T*K rows of H read, T rows written, plus the weights. "vs XLA"
is XLA's time for the same math written in jax.numpy (jit-fused) over ours: above 1 is faster. Needs a GPU and
the package built with CUDA.
"""

from __future__ import annotations

import datetime
import statistics
import time

DTYPE_CODES = {"float32": 11, "bfloat16": 10}  # xla_ffi/common/dtype.h
SUM = 0


def _xla_seconds(fn, args, iters):
    """Median over 3 rounds of `iters` back-to-back calls (dispatch overlaps execution)."""
    fn(*args).block_until_ready()
    rounds = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(iters):
            out = fn(*args)
        out.block_until_ready()
        rounds.append((time.perf_counter() - start) / iters)
    return statistics.median(rounds)


def _xla_reduce_seconds(count, dtype_name, operands, iters):
    import jax
    import jax.numpy as jnp

    dtype = jnp.dtype(dtype_name)
    xs = [jnp.full((count,), i + 1, dtype) for i in range(operands)]

    @jax.jit
    def reduce(*xs):
        acc = xs[0].astype(jnp.float32)
        for x in xs[1:]:
            acc = acc + x.astype(jnp.float32)
        return acc.astype(dtype)

    return _xla_seconds(reduce, xs, iters)


def _xla_combine_seconds(tokens, topk, hidden, rows, iters):
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    y = jnp.asarray(rng.normal(size=(rows, hidden)), jnp.bfloat16)
    idx = jnp.asarray(rng.integers(0, rows, size=(tokens, topk)), jnp.int32)
    w = jnp.asarray(rng.random(size=(tokens, topk)), jnp.float32)

    @jax.jit
    def combine(y, idx, w):
        acc = jnp.zeros((tokens, hidden), jnp.float32)
        for k in range(topk):
            acc = acc + w[:, k, None] * y[idx[:, k]].astype(jnp.float32)
        return acc.astype(y.dtype)

    return _xla_seconds(combine, (y, idx, w), iters)


def run(args) -> None:
    from .._ext import cuda_engine

    if cuda_engine is None or cuda_engine.device_count() == 0:
        raise SystemExit("jaccl-bench kernels needs a GPU and jax_jaccl built with CUDA (JACCL_CUDA=ON)")
    import jax

    gpu = jax.devices("gpu")[0].device_kind
    lines = [f"# jaccl-bench kernels on {gpu}, {datetime.date.today()}; GB/s = (bytes read + "
             "written) / time, CUDA events around --iters back-to-back calls", "",
             "| kernel | size | time | GB/s | % of copy | vs XLA |", "|---|---|---|---|---|---|"]
    for mib in args.sizes_mib:
        size = mib << 20
        copy = cuda_engine.bench_copy(size, args.iters)
        copy_bw = 2 * size / copy / 1e9
        lines.append(f"| device copy | {mib} MiB | {copy * 1e6:.1f} us | {copy_bw:.0f} | 100% | |")
        for name, code in DTYPE_CODES.items():
            count = size // (4 if name == "float32" else 2)
            for operands in (2, 4):
                t = cuda_engine.bench_reduce(code, SUM, count, operands, args.iters)
                xla = _xla_reduce_seconds(count, name, operands, args.iters)
                bw = (operands + 1) * size / t / 1e9
                lines.append(f"| reduce {operands}x {name} (sum) | {mib} MiB | {t * 1e6:.1f} us | "
                             f"{bw:.0f} | {100 * bw / copy_bw:.0f}% | {xla / t:.2f}x "
                             f"({xla * 1e6:.0f} us) |")
        last_copy_bw = copy_bw
    T, K, H, rows = args.tokens, args.topk, args.hidden, args.rows
    t = cuda_engine.bench_combine(DTYPE_CODES["bfloat16"], T, K, H, rows, args.iters)
    moved = T * K * H * 2 + T * H * 2 + T * K * 4
    xla = _xla_combine_seconds(T, K, H, rows, args.iters)
    lines.append(f"| MoE combine bf16 T={T} K={K} H={H} | {moved >> 20} MiB | {t * 1e6:.1f} us | "
                 f"{moved / t / 1e9:.0f} | {100 * moved / t / 1e9 / last_copy_bw:.0f}% | "
                 f"{xla / t:.2f}x ({xla * 1e6:.0f} us) |")
    print("\n".join(lines))
