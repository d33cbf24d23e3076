"""jaccl-bench overlap: how much independent compute a collective hides, blocking vs asynchronous.

    jaccl-bench overlap [--sizes 1M,16M,64M] [--link-rate 400mbit] [--runs 3] [--iters 5]
    jaccl-bench overlap --workload step [--sizes 1M,4M] [--layers 8]

Two emulated hosts (network namespaces, root) whose link carries --link-rate each way, so the
collective waits on the link rather than on this machine's cores; one process each. Every run
starts two jobs, JACCL_ASYNC=1 and JACCL_ASYNC=0 (every call blocks XLA's thread), alternating
so both see the same machine; each measures, per size S, a jaccl.all_reduce of S bytes alone,
a matmul chain of about the same duration alone, and a program with both
(overlap_worker.py). Hidden = (t_comm + t_compute - t_step) / min(t_comm, t_compute): 1 when
the step takes as long as the longer of the two, 0 when it takes their sum. Medians over runs;
the table's "alone" columns are the asynchronous job's, each hidden fraction uses its own job's.
With --workload step the program is a data-parallel training step whose gradients are reduced
layer by layer (overlap_step_worker.py: --layers layers of S-byte weights, a batch sized so that
the gradients take about as long as their reductions), the same columns for it and one more:
the forward pass alone plus the reductions alone, the shortest a step can be (the first
reduction needs the last layer's gradient, which needs the whole forward pass).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile

from .._emulated_hosts import EmulatedHosts, can_emulate
from . import jobs
from .sizes import human

MODES = (("asynchronous", "1"), ("blocking", "0"))


def hidden(r: dict) -> float:
    return (r["comm_s"] + r["compute_s"] - r["step_s"]) / min(r["comm_s"], r["compute_s"])


WORKERS = {"collective": "jax_jaccl.bench.overlap_worker",
           "step": "jax_jaccl.bench.overlap_step_worker"}
HEADS = {"collective": ("size", "all_reduce alone", "matmuls alone"),
         "step": ("layer size", "reductions alone", "gradients alone")}


def table(records: dict, workload: str = "collective") -> str:
    """records[mode] is a list (one per run) of the worker's lists."""
    size, comm, compute = HEADS[workload]
    first = records[MODES[0][0]][0]
    floor = "forward_s" in first[0]  # the step: reductions cannot start before the forward pass
    keys = ("comm_s", "compute_s", "step_s") + (("forward_s",) if floor else ())
    lines = [f"| {size} | {comm} | {compute} |{' forward + reductions |' if floor else ''} "
             "step, asynchronous | step, blocking | hidden, asynchronous | hidden, blocking |",
             "|---" * (7 + floor) + "|"]
    for i, row in enumerate(first):
        med = {mode: {k: statistics.median(run[i][k] for run in records[mode]) for k in keys}
               for mode, _ in MODES}
        a, b = med["asynchronous"], med["blocking"]
        bound = f" {(a['forward_s'] + a['comm_s']) * 1e3:.1f} ms |" if floor else ""
        lines.append(f"| {human(row['bytes'])} | {a['comm_s'] * 1e3:.1f} ms | "
                     f"{a['compute_s'] * 1e3:.1f} ms |{bound} {a['step_s'] * 1e3:.1f} ms | "
                     f"{b['step_s'] * 1e3:.1f} ms | {hidden(a):.2f} | {hidden(b):.2f} |")
    return "\n".join(lines)


def run(args) -> None:
    reason = can_emulate()
    if reason:
        raise SystemExit(f"jaccl-bench: {reason}")
    records = {mode: [] for mode, _ in MODES}
    with EmulatedHosts(2, rate=args.link_rate) as hosts, tempfile.TemporaryDirectory() as tmp:
        hostfile = hosts.write_hostfile(os.path.join(tmp, "hosts.json"), 1)
        for run_index in range(args.runs):
            for mode, flag in MODES:
                out = os.path.join(tmp, f"{mode}{run_index}.json")
                work = ["--sizes", args.sizes, "--iters", args.iters, "--output", out]
                if args.workload == "step":
                    work += ["--layers", args.layers]
                records[mode].append(jobs.run(
                    jobs.launch(["--hostfile", hostfile], WORKERS[args.workload], work,
                                xla_collectives="gloo"),
                    mode, output=out, env={"JACCL_ASYNC": flag}, timeout=args.timeout))
                print(f"run {run_index + 1}/{args.runs}: {mode} done", file=sys.stderr,
                      flush=True)
    if args.workload == "step":
        first = records[MODES[0][0]][0]
        what = (f"a data-parallel MLP step of {args.layers} layers, gradients all-reduced per "
                f"layer, last layer first (batch per device: "
                f"{', '.join(str(r['batch']) for r in first)})")
    else:
        what = ("float32 all_reduce beside a float32[512, 512] matmul chain of about its "
                "duration")
    print(f"# jaccl-bench overlap: 2 emulated hosts, {args.link_rate} each way, 1 process "
          f"each, {what}; medians of {args.runs} runs x {args.iters} rounds")
    print()
    print(table(records, args.workload))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f)
