"""jax.lax.ragged_all_to_all's documented semantics in numpy (XLA:CPU cannot run jax.lax's),
and random arguments that satisfy them: the reference for jaccl.ragged_all_to_all."""

from __future__ import annotations

import numpy as np


def ragged_all_to_all(operands, outputs, input_offsets, send_sizes, output_offsets, recv_sizes):
    """Per-device lists in, per-device results out: device s sends operand rows
    [input_offsets[s][i], + send_sizes[s][i]) to device i // k (k = K / n), which writes them at
    its rows output_offsets[s][i]; recv_sizes must be what the senders send."""
    n = len(operands)
    K = len(input_offsets[0])
    k = K // n
    results = [np.array(o, copy=True) for o in outputs]
    for s in range(n):
        for i in range(K):
            d, j = divmod(i, k)
            rows = int(send_sizes[s][i])
            assert recv_sizes[d][s * k + j] == rows, "inconsistent arguments"
            o, a = int(output_offsets[s][i]), int(input_offsets[s][i])
            results[d][o:o + rows] = operands[s][a:a + rows]
    return results


def transpose(cotangents, in_rows, input_offsets, send_sizes, output_offsets):
    """The adjoint of ragged_all_to_all for per-device output cotangents t: (dx, dy), dx[s] rows
    [input_offsets[s][i], + send_sizes[s][i]) = t[d] rows [output_offsets[s][i], + the same)
    for the device d = i // k they went to (zero where nothing was sent), dy[d] = t[d] with the
    rows that arrived zeroed (the output was overwritten there)."""
    n = len(cotangents)
    K = len(input_offsets[0])
    k = K // n
    dx = [np.zeros((in_rows,) + t.shape[1:], t.dtype) for t in cotangents]
    dy = [np.array(t, copy=True) for t in cotangents]
    for s in range(n):
        for i in range(K):
            d = i // k
            rows, o, a = int(send_sizes[s][i]), int(output_offsets[s][i]), int(input_offsets[s][i])
            dx[s][a:a + rows] = cotangents[d][o:o + rows]
            dy[d][o:o + rows] = 0
    return dx, dy


def random_arguments(rng, n, k, in_rows, out_rows, row_shape=(), dtype=np.float32, fill=0.5):
    """Valid arguments for n devices with k slices per pair: slices laid out with gaps in the
    operand, placed without overlap (in a shuffled order, with gaps) in the receivers' outputs.
    `fill` bounds the share of the operand's rows that are sent."""
    K = n * k
    sizes = np.zeros((n, K), np.int64)  # sizes[s, d * k + j]
    for s in range(n):
        budget = int(in_rows * fill)
        for i in rng.permutation(K):
            take = int(rng.integers(0, max(1, budget // K * 2) + 1))
            take = min(take, budget)
            sizes[s, i] = take
            budget -= take
    input_offsets = np.zeros((n, K), np.int64)
    for s in range(n):
        free = in_rows - sizes[s].sum()
        gaps = rng.multinomial(free, np.ones(K + 1) / (K + 1))[:K]
        input_offsets[s] = np.cumsum(gaps) + np.concatenate([[0], np.cumsum(sizes[s])[:-1]])
    output_offsets = np.zeros((n, K), np.int64)
    recv_sizes = np.zeros((n, K), np.int64)
    for d in range(n):
        arriving = [(s, j) for s in range(n) for j in range(k)]
        order = rng.permutation(len(arriving))
        total = sum(sizes[s, d * k + j] for s, j in arriving)
        assert total <= out_rows, "out_rows too small for these sizes"
        gaps = rng.multinomial(out_rows - total, np.ones(len(arriving) + 1) / (len(arriving) + 1))
        at = 0
        for g, idx in zip(gaps, order):
            s, j = arriving[idx]
            at += g
            output_offsets[s, d * k + j] = at
            recv_sizes[d, s * k + j] = sizes[s, d * k + j]
            at += sizes[s, d * k + j]
    shape = lambda rows: (rows,) + tuple(row_shape)  # noqa: E731
    operands = [(rng.integers(-50, 50, size=shape(in_rows))).astype(dtype) for _ in range(n)]
    outputs = [(rng.integers(-50, 50, size=shape(out_rows)) + 1000).astype(dtype) for _ in range(n)]
    return operands, outputs, input_offsets, sizes, output_offsets, recv_sizes
