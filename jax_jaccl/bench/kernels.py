"""jaccl-bench kernels: jaccl's CUDA kernels (the reduction, the MoE combine, the row gather
and the dispatch's packing) against the device's copy bandwidth and against XLA doing the
same math, all timed on the device in one run. Needs a GPU and the package built with CUDA.

Timing. jaccl's kernels: CUDA events around --iters back-to-back launches. XLA: the same
math inside a jitted lax.fori_loop (a static trip count runs without host round trips),
each call's result feeding the next call (so XLA can neither hoist nor fuse it across
calls), timed for P + 1 and for 1 trips: the difference is 2P calls' device time, free of
dispatch (P = --iters / 2). The loop carries two buffers and each trip makes two calls, the
first from buffer A into B, the second from B into A: a call whose output went to the very
buffer it reads (a gather, the combine) would make XLA copy its result into the carry on
every trip, charging XLA for a copy it would not make outside the loop; an optimization
barrier between the two keeps XLA from fusing them into one pass. The compiled loop is
checked for such copies, and any is named under the table. Each measurement is repeated
--rounds times; the table gives the median and the min. Bandwidth counts bytes read plus
bytes written (a copy of S bytes moves 2S); "% of copy" is against a device copy moving the
same bytes, measured in the same run; "vs XLA" is XLA's median time over jaccl's (above 1:
jaccl is faster).

Inputs are random, and the MoE kernels read a distinct row for every (token, k) pair in a
shuffled order, as a dispatch's layout does (no row served twice from L2). Before timing,
each kernel's result is checked against XLA's: bit for bit for the reduction, the gather and
the packing; for the combine, within one rounding of bfloat16 (XLA may fuse w * row + acc
into an FMA where jaccl rounds twice, as its CPU path does). A mismatch shows in the check
column and makes the command exit with status 1.
"""

from __future__ import annotations

import datetime
import re
import statistics
import sys
import time

from .sizes import human, parse_sizes

DTYPE_CODES = {"float32": 11, "bfloat16": 10}  # xla_ffi/common/dtype.h
SUM = 0  # xla_ffi/common/reduce.h


class Table:
    def __init__(self, copy_seconds):
        self.copy_seconds = copy_seconds  # bytes -> device copy samples, memoised
        self.rows = []
        self.notes = []  # lines printed under the table
        self.failed = False

    def add(self, kernel, size, moved, ours, xla=None, check="ok"):
        """One row: `moved` bytes read + written per call, `ours`/`xla` seconds per call."""
        copy_bw = 2 * (moved // 2) / statistics.median(self.copy_seconds(moved // 2)) / 1e9
        t = statistics.median(ours)
        bw = moved / t / 1e9
        versus = " | "
        if xla is not None:
            xt = statistics.median(xla)
            versus = f"{xt / t:.2f}x | {xt * 1e6:.1f} ({min(xla) * 1e6:.1f})"
        self.failed |= check != "ok"
        self.rows.append(f"| {kernel} | {size} | {t * 1e6:.1f} ({min(ours) * 1e6:.1f}) | {bw:.0f} | "
                         f"{100 * bw / copy_bw:.0f}% | {versus} | {check} |")


def xla_loop(body, trips):
    """jit of fori_loop(trips) over the carry (a, b), each trip b = body(a, *k); a = body(b, *k)."""
    import jax

    def trip(_, ab, consts):
        b = jax.lax.optimization_barrier(body(ab[0], *consts))  # no fusing the two calls into one
        return body(b, *consts), b

    return jax.jit(lambda c, *k: jax.lax.fori_loop(0, trips, lambda i, ab: trip(i, ab, k), (c, c)))


def loop_body_copies(hlo_text: str) -> list[str]:
    """The copy instructions of a compiled module's text in the computations that run on every
    trip of its loops: any but the entry computation and the bodies of fusions (a copy inside
    a fusion is part of that fused kernel, not a kernel of its own)."""
    fused = set(re.findall(r" fusion\(.*?calls=(%[\w.-]+)", hlo_text))
    found, counted = [], False
    for line in hlo_text.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith("{"):
            counted = not line.startswith("ENTRY") and line.split()[0] not in fused
        elif counted and re.search(r"= \S+ copy(-start)?\(", line):
            found.append(line.strip())
    return found


def _xla_loop_seconds(body, carry, consts, iters, rounds, notes, kernel):
    """Device seconds of one body(carry, *consts) -> carry, per round; copies that the loop
    makes on every trip go into `notes` under the kernel's name."""
    pairs = max(1, iters // 2)
    many, one = (xla_loop(body, trips).lower(carry, *consts).compile() for trips in (pairs + 1, 1))
    copies = loop_body_copies(many.as_text())
    if copies:
        notes.append(f"note: {kernel}: XLA's loop copies on every trip, its time includes them: {'; '.join(copies)}")
    many(carry, *consts)[0].block_until_ready()
    one(carry, *consts)[0].block_until_ready()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        many(carry, *consts)[0].block_until_ready()
        middle = time.perf_counter()
        one(carry, *consts)[0].block_until_ready()
        end = time.perf_counter()
        samples.append(max((middle - start) - (end - middle), 1e-9) / (2 * pairs))
    return samples


def _bits(x):
    import jax
    import jax.numpy as jnp

    return jax.lax.bitcast_convert_type(x, {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}[x.dtype.itemsize])


def _same_bits(a, b) -> str:
    import jax.numpy as jnp

    if a.shape != b.shape:
        return f"MISMATCH: shape {a.shape} vs {b.shape}"
    differ = int(jnp.sum(_bits(a) != _bits(b)))
    return "ok" if differ == 0 else f"MISMATCH: {differ} elements differ from XLA's"


def _within_one_rounding(a, b) -> str:
    import jax.numpy as jnp

    a, b = a.astype(jnp.float32), b.astype(jnp.float32)
    worst = float(jnp.max(jnp.abs(a - b) - (2.0 ** -7 * jnp.abs(b) + 1e-5)))
    return "ok" if worst <= 0 else f"MISMATCH: off by {worst:.3g} beyond one bfloat16 rounding"


def reduce_math(dtype):
    import jax.numpy as jnp

    def reduce(first, *rest):  # operand order and float32 accumulation, as jaccl's kernel
        acc = first.astype(jnp.float32)
        for x in rest:
            acc = acc + x.astype(jnp.float32)
        return acc.astype(dtype)

    return reduce


def bench_reduce(engine, table, size, dtype_name, operands, args):
    import jax
    import jax.numpy as jnp

    dtype = jnp.dtype(dtype_name)
    count = size // dtype.itemsize
    keys = jax.random.split(jax.random.PRNGKey(operands), operands)
    xs = [jax.random.normal(k, (count,), jnp.float32).astype(dtype) for k in keys]
    out = jnp.zeros((count,), dtype)
    jax.block_until_ready([*xs, out])
    math = reduce_math(dtype)
    ptrs = [x.unsafe_buffer_pointer() for x in xs]
    code = DTYPE_CODES[dtype_name]
    engine.bench_reduce(code, SUM, ptrs, out.unsafe_buffer_pointer(), count, 0)
    check = _same_bits(out, jax.jit(math)(*xs))
    ours = [engine.bench_reduce(code, SUM, ptrs, out.unsafe_buffer_pointer(), count, args.iters)
            for _ in range(args.rounds)]
    name = f"reduce {operands}x {dtype_name} (sum)"
    xla = _xla_loop_seconds(math, xs[0], xs[1:], args.iters, args.rounds, table.notes, name)
    table.add(name, human(size), (operands + 1) * size, ours, xla, check)


def combine_math(topk):
    """XLA's MoE combine: out[t] = sum over k of w[t, k] * y[idx[t, k]], in float32."""
    import jax.numpy as jnp

    def combine(y, idx, w):
        acc = w[:, 0, None] * y[idx[:, 0]].astype(jnp.float32)
        for k in range(1, topk):
            acc = acc + w[:, k, None] * y[idx[:, k]].astype(jnp.float32)
        return acc.astype(y.dtype)

    return combine


def combine_step(topk):
    """The combine as a loop body: weights that depend on the previous result (nothing to hoist)."""
    import jax.numpy as jnp

    combine = combine_math(topk)
    return lambda previous, y, idx, w: combine(y, idx, w + previous[0, 0].astype(jnp.float32) * 0)


def gather_math(rows, order):
    """XLA's row gather (and the dispatch's packing): rows[order]."""
    import jax.numpy as jnp

    return jnp.take(rows, order, axis=0)


def moe_inputs(tokens, topk, hidden):
    """Rows for every (token, k) pair, a shuffled order of them, weights."""
    import jax
    import jax.numpy as jnp

    key_rows, key_order, key_w = jax.random.split(jax.random.PRNGKey(hidden), 3)
    pairs = tokens * topk
    rows = jax.random.normal(key_rows, (pairs, hidden), jnp.float32).astype(jnp.bfloat16)
    order = jax.random.permutation(key_order, pairs).astype(jnp.int32)
    weights = jax.random.uniform(key_w, (tokens, topk), jnp.float32)
    return jax.block_until_ready((rows, order, weights))


def bench_combine(engine, table, tokens, topk, hidden, inputs, args):
    import jax
    import jax.numpy as jnp
    import numpy as np

    rows, order, weights = inputs
    idx = order.reshape(tokens, topk)
    row_bytes = hidden * 2
    base = rows.unsafe_buffer_pointer()
    addresses = [base + int(r) * row_bytes for r in np.asarray(order)]
    out = jax.block_until_ready(jnp.zeros((tokens, hidden), jnp.bfloat16))

    combine, step = combine_math(topk), combine_step(topk)
    launch = lambda iters: engine.bench_combine(DTYPE_CODES["bfloat16"], out.unsafe_buffer_pointer(), addresses,
                                                weights.unsafe_buffer_pointer(), tokens, topk, hidden, iters)
    launch(0)
    check = _within_one_rounding(out, jax.jit(combine)(rows, idx, weights))
    ours = [launch(args.iters) for _ in range(args.rounds)]
    name = f"MoE combine bf16 T={tokens} K={topk} H={hidden}"
    xla = _xla_loop_seconds(step, out, (rows, idx, weights), args.iters, args.rounds, table.notes, name)
    moved = tokens * topk * row_bytes + tokens * row_bytes + tokens * topk * 4
    table.add(name, human(moved), moved, ours, xla, check)


def bench_row_moves(engine, table, tokens, topk, hidden, inputs, args):
    """The row gather and the dispatch's packing (into 8 destinations' ranges) of every
    (token, k) pair's row, in shuffled order; XLA: jnp.take of the same rows."""
    import jax
    import jax.numpy as jnp

    rows, order, _ = inputs
    n, row_bytes = tokens * topk, hidden * 2
    groups = 8
    offsets = jnp.asarray([n * g // groups for g in range(groups + 1)], jnp.int32)
    want = jax.jit(gather_math)(rows, order)
    xla = _xla_loop_seconds(gather_math, rows, (order,), args.iters, args.rounds, table.notes,
                            f"XLA's gather of {n} rows H={hidden}")
    for name in ("gather rows", "dispatch pack"):
        dst = jax.block_until_ready(jnp.zeros_like(rows))  # a fresh output for each kernel's check
        if name == "gather rows":
            launch = lambda iters: engine.bench_gather(dst.unsafe_buffer_pointer(), rows.unsafe_buffer_pointer(),
                                                       order.unsafe_buffer_pointer(), n, row_bytes, iters)
        else:
            launch = lambda iters: engine.bench_pack(dst.unsafe_buffer_pointer(), rows.unsafe_buffer_pointer(), n,
                                                     order.unsafe_buffer_pointer(), offsets.unsafe_buffer_pointer(),
                                                     groups, n, row_bytes, iters)
        launch(0)
        check = _same_bits(dst, want)
        ours = [launch(args.iters) for _ in range(args.rounds)]
        table.add(f"{name} bf16 {n} rows H={hidden}", human(n * row_bytes), 2 * n * row_bytes, ours, xla, check)


def run(args) -> None:
    from .._ext import cuda_engine

    if cuda_engine is None or cuda_engine.device_count() == 0:
        raise SystemExit("jaccl-bench kernels needs a GPU and jax_jaccl built with CUDA (JACCL_CUDA=ON)")
    import jax

    copies = {}

    def copy_seconds(nbytes):
        if nbytes not in copies:
            copies[nbytes] = [cuda_engine.bench_copy(nbytes, args.iters) for _ in range(args.rounds)]
        return copies[nbytes]

    table = Table(copy_seconds)
    for size in parse_sizes(args.sizes):
        table.add("device copy", human(size), 2 * size, copy_seconds(size))
        for dtype_name in args.dtypes.split(","):
            for operands in map(int, args.operands.split(",")):
                bench_reduce(cuda_engine, table, size, dtype_name, operands, args)
    for hidden in map(int, args.hidden.split(",")):
        inputs = moe_inputs(args.tokens, args.topk, hidden)
        bench_combine(cuda_engine, table, args.tokens, args.topk, hidden, inputs, args)
        bench_row_moves(cuda_engine, table, args.tokens, args.topk, hidden, inputs, args)
        del inputs
    gpu = jax.devices("gpu")[0].device_kind
    print("\n".join([
        f"# jaccl-bench kernels on {gpu}, {datetime.date.today()}: times in us, median (min) of "
        f"{args.rounds} rounds of {args.iters} calls; GB/s = (bytes read + written) / median time",
        "", "| kernel | size | time | GB/s | % of copy | vs XLA | XLA time | check |",
        "|---|---|---|---|---|---|---|---|", *table.rows, *(["", *table.notes] if table.notes else [])]))
    if table.failed:
        print("jaccl-bench kernels: a kernel's result differs from XLA's (check column)", file=sys.stderr)
        sys.exit(1)
