"""jaccl-bench collectives --emulate-hosts N: all_reduce across N emulated hosts (network
namespaces, one veth link per host pair, each direction rate-limited to B by tc tbf), one
process per host, each algorithm in turn, beside the time its schedule needs on such links.

Link-rate bounds for S bytes on N hosts: mesh scatter-gather 2S/(NB) (every host drives its
N-1 links at once, twice), bidirectional ring (N-1)S/(NB) (two links per host), one-way ring
2(N-1)S/(NB) (one link per host), naive S/B (every host sends all of S to every peer at once).

With --transports tcp,ofi the mesh all_reduce runs over each transport between hosts instead
(jaccl's TCP, libfabric with --ofi-provider), side by side; --link-rate none leaves the links
unlimited (no bound: compare with jaccl-bench transport on the same links).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

from .._emulated_hosts import EmulatedHosts, can_emulate
from . import jobs
from .sizes import human
from .transport import transport_env

ALGORITHMS = ("mesh", "ring", "ring_oneway", "naive")
NAMES = {"mesh": "mesh scatter-gather", "ring": "ring (bidirectional)", "ring_oneway":
         "ring (one-way)", "naive": "naive"}


def rate_bytes_per_s(rate: str) -> float | None:
    text = rate.lower().strip()
    if text in ("", "none"):
        return None
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale / 8
    raise SystemExit(f"jaccl-bench: cannot read --link-rate {rate!r} (e.g. 200mbit)")


def bound(algorithm: str, nbytes: int, n: int, rate: float) -> float:
    return {"mesh": 2 * nbytes / (n * rate), "ring": (n - 1) * nbytes / (n * rate),
            "ring_oneway": 2 * (n - 1) * nbytes / (n * rate), "naive": nbytes / rate}[algorithm]


def run(args) -> None:
    reason = can_emulate()
    if reason:
        raise SystemExit(f"jaccl-bench: {reason}")
    if args.topology != "mesh":
        raise SystemExit("jaccl-bench: --topology mesh is the one emulated (a link per host pair)")
    n, rate = args.emulate_hosts, rate_bytes_per_s(args.link_rate)
    transports = [t for t in args.transports.split(",") if t]
    compare = transports != ["tcp"]
    if rate is None and not compare:
        raise SystemExit("jaccl-bench: the algorithm table needs a --link-rate (its bounds)")
    plan = [(t, a) for t in transports for a in (("mesh",) if compare else ALGORITHMS)]
    records = []
    with EmulatedHosts(n, rate=args.link_rate if rate else None) as hosts, \
            tempfile.TemporaryDirectory() as tmp:
        hostfile = hosts.write_hostfile(os.path.join(tmp, "hosts.json"), 1)
        for run_index in range(args.runs):
            for transport, algorithm in plan:
                name = transport if compare else algorithm
                out = os.path.join(tmp, f"{name}{run_index}.json")
                cmd = jobs.launch(["--hostfile", hostfile], "jax_jaccl.bench.collectives_worker",
                                  ["--sizes", args.sizes, "--ops", "all_reduce", "--impls", "jaccl",
                                   "--algorithm", algorithm, "--budget-mb", "64", "--output", out])
                records += [dict(r, impl=name) for r in jobs.run(
                    cmd, name, output=out, env=transport_env(transport, args.ofi_provider),
                    timeout=args.timeout)]
                print(f"run {run_index + 1}/{args.runs}: {name} done", file=sys.stderr, flush=True)
    print(f"# jaccl-bench collectives --emulate-hosts {n} --link-rate {args.link_rate} "
          f"--topology mesh{' --transports ' + args.transports if compare else ''}: all_reduce, "
          f"float32, 1 process per host, median of {args.runs} runs")
    print(transport_table(records, transports, n, rate) if compare else table(records, n, rate))
    if args.plot and not compare:
        plot(records, n, rate, args.plot)
        print(f"\nplot: {args.plot}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)


def _medians(records):
    import statistics

    grouped = {}
    for r in records:
        grouped.setdefault((r["impl"], r["bytes"]), []).append(r["median_s"])
    return {k: statistics.median(v) for k, v in grouped.items()}


def _time(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.3f} s"


def table(records, n: int, rate: float) -> str:
    medians = _medians(records)
    sizes = sorted({b for _, b in medians})
    header = ["size"] + [f"{NAMES[a]} (bound)" for a in ALGORITHMS] + \
             ["mesh % of bound", "mesh vs ring", "mesh vs one-way", "fastest"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for nbytes in sizes:
        row = [human(nbytes)]
        for a in ALGORITHMS:
            t = medians.get((a, nbytes))
            row.append(f"{_time(t)} ({_time(bound(a, nbytes, n, rate))})" if t else "—")
        mesh = medians.get(("mesh", nbytes))
        ring = medians.get(("ring", nbytes))
        oneway = medians.get(("ring_oneway", nbytes))
        row.append(f"{100 * bound('mesh', nbytes, n, rate) / mesh:.0f}%" if mesh else "—")
        row.append(f"{ring / mesh:.2f}x" if mesh and ring else "—")
        row.append(f"{oneway / mesh:.2f}x" if mesh and oneway else "—")
        present = [a for a in ALGORITHMS if (a, nbytes) in medians]
        row.append(NAMES[min(present, key=lambda a: medians[(a, nbytes)])] if present else "—")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def transport_table(records, transports, n: int, rate: float | None) -> str:
    """Mesh all_reduce over each transport: time, % of the link-rate bound, busbw."""
    medians = _medians(records)
    sizes = sorted({b for _, b in medians})
    header = ["size"] + (["bound"] if rate else []) + \
             [f"{t} ({'% of bound' if rate else 'busbw GB/s'})" for t in transports]
    if len(transports) == 2:
        header.append(f"{transports[1]} vs {transports[0]}")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for nbytes in sizes:
        row = [human(nbytes)] + ([_time(bound("mesh", nbytes, n, rate))] if rate else [])
        times = [medians.get((t, nbytes)) for t in transports]
        for t in times:
            if t is None:
                row.append("—")
            elif rate:
                row.append(f"{_time(t)} ({100 * bound('mesh', nbytes, n, rate) / t:.0f}%)")
            else:
                row.append(f"{_time(t)} ({2 * (n - 1) / n * nbytes / t / 1e9:.2f})")
        if len(transports) == 2:
            row.append(f"{times[0] / times[1]:.2f}x" if all(times) else "—")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def plot(records, n: int, rate: float, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    medians = _medians(records)
    sizes = sorted({b for _, b in medians})
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for a in ALGORITHMS:
        points = [(b, medians[(a, b)]) for b in sizes if (a, b) in medians]
        line, = ax.plot([b for b, _ in points], [t for _, t in points], marker="o", label=NAMES[a])
        ax.plot(sizes, [bound(a, b, n, rate) for b in sizes], linestyle="--",
                color=line.get_color(), alpha=0.6)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("bytes per rank")
    ax.set_ylabel("time per all_reduce (s); dashed: link-rate bound")
    ax.set_title(f"all_reduce, {n} hosts, full mesh of links")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
