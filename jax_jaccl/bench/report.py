"""Turns benchmark records into the nccl-tests style table and the plot.

Contract: records are dicts with impl, op, bytes, ranks, median_s (one per run), and
engine_median_s where the worker kept the engine's own time (--engine-time); the table shows
per op and size the median over runs of each implementation's median time, algbw and busbw
(GB/s), and jaccl's busbw as a multiple of each peer's; with engine times, an "engine" column
beside each implementation that has them (the median over runs)."""

from __future__ import annotations

import collections
import statistics

from .sizes import EVERY_OP, bus_factor, human

NAMES = {"jaccl": "jaccl", "lax": "jax gloo", "mpi4jax": "mpi4jax", "mpi": "mpi4py (numpy)",
         "local": "local", "shm": "shm copy (numpy)", "jaccl_padded": "jaccl padded",
         "lax_on_jaccl": "lax on jaccl"}

# What each implementation runs where the op's name alone does not say it.
NOTES = {"all_gather": "local: XLA writing the gathered output from the input alone "
                       "(jnp.tile), into a fresh buffer as jaccl's output is",
         "ragged_all_to_all": "jaccl: ragged_all_to_all of the filled rows; jaccl padded and "
                              "jax gloo: all_to_all of whole slots (XLA:CPU has no "
                              "ragged_all_to_all); busbw of the padded exchange",
         "ppermute": "a shift by one, in place; shm copy: two numpy processes swapping S bytes "
                     "through shared-memory rings (only where 2 processes run)"}


def summarize(records):
    """(op, bytes, impl) -> (median seconds over runs, ranks, runs)."""
    grouped = collections.defaultdict(list)
    ranks = {}
    for r in records:
        grouped[(r["op"], r["bytes"], r["impl"])].append(r["median_s"])
        ranks[(r["op"], r["bytes"], r["impl"])] = r["ranks"]
    return {k: (statistics.median(v), ranks[k], len(v)) for k, v in grouped.items()}


def engine_times(records):
    """(op, bytes, impl) -> the median over runs of engine_median_s, where records have it."""
    grouped = collections.defaultdict(list)
    for r in records:
        if r.get("engine_median_s") is not None:
            grouped[(r["op"], r["bytes"], r["impl"])].append(r["engine_median_s"])
    return {k: statistics.median(v) for k, v in grouped.items()}


def _time(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def table(records, impls, reference=None) -> str:
    """`reference`: an implementation shown by its time only (a local op without
    communication, e.g. jit-compiled x + 1 on the same buffer). An op's table has the
    implementations that measured it."""
    summary = summarize(records)
    engine = engine_times(records)
    ops = [op for op in EVERY_OP if any(k[0] == op for k in summary)]
    lines = []
    for op in ops:
        sizes = sorted({k[1] for k in summary if k[0] == op})
        shown = [i for i in impls if any(k[0] == op and k[2] == i for k in summary)]
        peers = [i for i in shown if i != "jaccl"]
        timed = {i for i in shown if any(k[0] == op and k[2] == i for k in engine)}
        columns = {i: ("time", "busbw") + (("engine",) if i in timed else ()) for i in shown}
        header = ["size"] + [f"{NAMES[i]} {what}" for i in shown for what in columns[i]] + \
                 [f"jaccl busbw / {NAMES[p]}" for p in peers] + \
                 ([f"{NAMES[reference]} time"] if reference else [])
        lines += [f"\n**{op}**" + (f" ({NOTES[op]})" if op in NOTES else "") + "\n",
                  "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for nbytes in sizes:
            row = [human(nbytes)]
            bus = {}
            for impl in shown:
                entry = summary.get((op, nbytes, impl))
                own = ([_time(engine[(op, nbytes, impl)]) if (op, nbytes, impl) in engine
                        else "—"] if impl in timed else [])
                if entry is None:
                    row += ["—", "—"] + own
                    continue
                seconds, n, _runs = entry
                bus[impl] = nbytes / seconds * bus_factor(op, n) / 1e9
                row += [_time(seconds), f"{bus[impl]:.2f}"] + own
            for peer in peers:
                row.append(f"{bus['jaccl'] / bus[peer]:.1f}x" if "jaccl" in bus and peer in bus
                           else "—")
            if reference:
                entry = summary.get((op, nbytes, reference))
                row.append(_time(entry[0]) if entry else "—")
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def plot(records, impls, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = summarize(records)
    ops = [op for op in EVERY_OP if any(k[0] == op for k in summary)]
    fig, axes = plt.subplots(1, len(ops), figsize=(5 * len(ops), 4), squeeze=False)
    for ax, op in zip(axes[0], ops):
        for impl in impls:
            points = sorted((k[1], v) for k, v in summary.items() if k[0] == op and k[2] == impl)
            if not points:
                continue
            xs = [b for b, _ in points]
            ys = [b / s * bus_factor(op, n) / 1e9 for b, (s, n, _) in points]
            ax.plot(xs, ys, marker="o", label=NAMES[impl])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(op)
        ax.set_xlabel("bytes per rank")
        ax.set_ylabel("busbw (GB/s)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
