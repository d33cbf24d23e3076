"""jaccl-bench collectives --emulate-hosts N: all_reduce across N emulated hosts (network
namespaces, one veth link per host pair, each direction rate-limited to B by tc tbf), one
process per host, each algorithm in turn, beside the time its schedule needs on such links.

Link-rate bounds for S bytes on N hosts: mesh scatter-gather 2S/(NB) (every host drives its
N-1 links at once, twice), bidirectional ring (N-1)S/(NB) (two links per host), one-way ring
2(N-1)S/(NB) (one link per host), naive S/B (every host sends all of S to every peer at once).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from .emulated_hosts import EmulatedHosts, can_emulate
from .sizes import human

ALGORITHMS = ("mesh", "ring", "ring_oneway", "naive")
NAMES = {"mesh": "mesh scatter-gather", "ring": "ring (bidirectional)", "ring_oneway":
         "ring (one-way)", "naive": "naive"}


def rate_bytes_per_s(rate: str) -> float:
    text = rate.lower().strip()
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
    records = []
    with EmulatedHosts(n, rate=args.link_rate) as hosts, tempfile.TemporaryDirectory() as tmp:
        hostfile = hosts.write_hostfile(os.path.join(tmp, "hosts.json"), 1)
        for run_index in range(args.runs):
            for algorithm in ALGORITHMS:
                out = os.path.join(tmp, f"{algorithm}{run_index}.json")
                cmd = [sys.executable, "-m", "jax_jaccl.launch", "--hostfile", hostfile, "--",
                       sys.executable, "-m", "jax_jaccl.bench.collectives_worker", "--sizes",
                       args.sizes, "--ops", "all_reduce", "--impls", "jaccl", "--algorithm",
                       algorithm, "--budget-mb", "64", "--output", out]
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                if done.returncode != 0:
                    log = os.path.abspath(f"jaccl-bench-{algorithm}-failed.log")
                    with open(log, "w") as f:
                        f.write(done.stdout)
                    raise SystemExit(f"jaccl-bench: the {algorithm} run failed; output in {log}")
                with open(out) as f:
                    records += [dict(r, impl=algorithm) for r in json.load(f)]
                print(f"run {run_index + 1}/{args.runs}: {algorithm} done", file=sys.stderr,
                      flush=True)
    print(f"# jaccl-bench collectives --emulate-hosts {n} --link-rate {args.link_rate} "
          f"--topology mesh: all_reduce, float32, 1 process per host, median of {args.runs} runs")
    print(table(records, n, rate))
    if args.plot:
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
