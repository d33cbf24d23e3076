"""jaccl-bench: measure jax_jaccl against its peers, nccl-tests style.

    jaccl-bench collectives [--nprocs 2] [--devices-per-process 1] [--sizes 4K,64K,1M,16M,64M]
                            [--ops all_reduce,reduce_scatter,all_gather,ppermute,ragged_all_to_all]
                            [--vs lax,lax_on_jaccl,mpi4jax,mpi,shm]
                            [--runs 3] [--algorithm auto] [--plot FILE.png] [--json FILE]
    jaccl-bench collectives --emulate-hosts 4 --link-rate 200mbit --topology mesh
                            [--transports tcp,ofi] [--sizes ...] [--runs 1] [--plot FILE.png]
    jaccl-bench transport   [--transports tcp,ofi] [--frame-kb 64,512] [--both-ways]
                            [--emulate-hosts --link-rate none]   (see transport.py)
    jaccl-bench moe [...]   (see jax_jaccl/bench/moe.py)
    jaccl-bench overlap     [--sizes 1M,16M,64M] [--link-rate 400mbit] (see overlap.py)
    jaccl-bench kernels     (a GPU: see jax_jaccl/bench/kernels.py)

Each run starts one jaccl-run job (jax_jaccl, and jax's own collectives, gloo, for --vs lax), for
--vs lax_on_jaccl one more whose jax.lax collectives run on jaccl (--xla-collectives jaccl), and,
for --vs mpi4jax/mpi, one mpirun job (Open MPI from apt; mpi4py and mpi4jax from the bench
extra), alternating so that both see the same machine; --vs shm adds, for ppermute between
2 processes, a plain shared-memory copy of the same bytes (shm_copy.py). The table shows
medians over runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

from . import report
from .sizes import DEFAULT_SIZES, EVERY_OP, OPS


def _run(cmd, timeout):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"jaccl-bench: {' '.join(cmd[:6])} ... failed ({done.returncode})")


def mpi_impls_of(peers):
    return [p for p in peers if p in ("mpi4jax", "mpi")]


def shm_records(sizes):
    """ppermute's bar: the same bytes copied from one process to another through shared memory."""
    import statistics

    from . import shm_copy
    from .sizes import iterations, parse_sizes

    records = []
    for nbytes in parse_sizes(sizes):
        times = shm_copy.measure(nbytes, iterations(nbytes))
        records.append({"impl": "shm", "op": "ppermute", "bytes": nbytes, "ranks": 2,
                        "median_s": statistics.median(times), "min_s": min(times),
                        "iters": len(times)})
    return records


def collectives(args) -> None:
    if args.emulate_hosts:
        from . import emulate

        return emulate.run(args)
    peers = [p for p in args.vs.split(",") if p] if args.vs else []
    unknown = set(peers) - {"lax", "lax_on_jaccl", "mpi4jax", "mpi", "shm"}
    if unknown:
        raise SystemExit(f"jaccl-bench: unknown --vs {sorted(unknown)} (use lax, lax_on_jaccl, "
                         "mpi4jax, mpi, shm)")
    ops = [op for op in args.ops.split(",") if op]
    unknown = set(ops) - set(EVERY_OP)
    if unknown:
        raise SystemExit(f"jaccl-bench: unknown --ops {sorted(unknown)} (use {', '.join(EVERY_OP)})")
    if mpi_impls_of(peers) and set(ops) - set(OPS):
        raise SystemExit("jaccl-bench: the MPI peers run all_reduce, reduce_scatter, all_gather")
    mpi_impls = mpi_impls_of(peers)
    if mpi_impls and not shutil.which("mpirun"):
        raise SystemExit("jaccl-bench: --vs mpi4jax/mpi needs Open MPI (apt-get install "
                         "openmpi-bin libopenmpi-dev) and pip install '.[bench]'")
    if mpi_impls and args.devices_per_process != 1:
        raise SystemExit("jaccl-bench: the MPI peers run one device per process")
    jax_impls = ["jaccl"] + (["lax"] if "lax" in peers else []) + ["local"]
    if "ragged_all_to_all" in ops:
        jax_impls.insert(1, "jaccl_padded")
    shm = "shm" in peers and "ppermute" in ops and args.nprocs == 2 and args.devices_per_process == 1
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            out = os.path.join(tmp, f"jax{run}.json")
            _run([sys.executable, "-m", "jax_jaccl.launch", "-n", str(args.nprocs),
                  "--devices-per-process", str(args.devices_per_process),
                  "--xla-collectives", "gloo", "--",  # lax: JAX's own collectives
                  sys.executable, "-m", "jax_jaccl.bench.collectives_worker", "--sizes", args.sizes,
                  "--ops", args.ops, "--impls", ",".join(jax_impls), "--algorithm", args.algorithm,
                  "--output", out], args.timeout)
            with open(out) as f:
                records += json.load(f)
            if "lax_on_jaccl" in peers:
                out = os.path.join(tmp, f"lax_on_jaccl{run}.json")
                _run([sys.executable, "-m", "jax_jaccl.launch", "-n", str(args.nprocs),
                      "--devices-per-process", str(args.devices_per_process),
                      "--xla-collectives", "jaccl", "--", sys.executable, "-m",
                      "jax_jaccl.bench.collectives_worker", "--sizes", args.sizes, "--ops",
                      args.ops,
                      "--impls", "lax_on_jaccl", "--output", out], args.timeout)
                with open(out) as f:
                    records += json.load(f)
            if mpi_impls:
                out = os.path.join(tmp, f"mpi{run}.json")
                mpirun = ["mpirun", "-n", str(args.nprocs)]
                if os.geteuid() == 0:
                    mpirun.append("--allow-run-as-root")
                _run(mpirun + ["--oversubscribe", sys.executable, "-m",
                               "jax_jaccl.bench.mpi_worker", "--sizes", args.sizes, "--ops",
                               args.ops, "--impls", ",".join(mpi_impls), "--output", out],
                     args.timeout)
                with open(out) as f:
                    records += json.load(f)
            if shm:
                records += shm_records(args.sizes)
            print(f"run {run + 1}/{args.runs} done", file=sys.stderr, flush=True)
    impls = ["jaccl"] + [p for p in peers if p in jax_impls + mpi_impls + ["lax_on_jaccl"]] + \
        (["jaccl_padded"] if "jaccl_padded" in jax_impls else []) + (["shm"] if shm else [])
    ranks = args.nprocs * args.devices_per_process
    print(f"# jaccl-bench collectives: {args.nprocs} processes x {args.devices_per_process} "
          f"devices ({ranks} ranks), float32, median of {args.runs} runs; time per call, "
          "busbw in GB/s")
    print(report.table(records, impls, reference="local"))
    if args.plot:
        report.plot(records, impls, args.plot)
        print(f"\nplot: {args.plot}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="jaccl-bench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collectives", help="all_reduce, reduce_scatter, all_gather, ppermute, "
                                           "ragged_all_to_all")
    c.add_argument("--nprocs", type=int, default=2)
    c.add_argument("--devices-per-process", type=int, default=1)
    c.add_argument("--sizes", default=DEFAULT_SIZES)
    c.add_argument("--ops", default=",".join(OPS))
    c.add_argument("--vs", default="", help="comma list of lax, lax_on_jaccl, mpi4jax, mpi, shm")
    c.add_argument("--runs", type=int, default=3)
    c.add_argument("--algorithm", default="auto")
    c.add_argument("--plot", default=None)
    c.add_argument("--json", default=None)
    c.add_argument("--timeout", type=float, default=1800)
    c.add_argument("--emulate-hosts", type=int, default=0,
                   help="run all_reduce across N emulated hosts (root; see emulate.py)")
    c.add_argument("--link-rate", default="200mbit", help="per direction of every link")
    c.add_argument("--topology", default="mesh")
    c.add_argument("--transports", default="tcp",
                   help="with --emulate-hosts: tcp (every algorithm), or e.g. tcp,ofi (mesh "
                        "all_reduce over each, side by side)")
    c.add_argument("--ofi-provider", default="tcp;ofi_rxm")
    c.set_defaults(fn=collectives)
    t = sub.add_parser("transport", help="frames between two hosts, no collective: each "
                                         "transport's ceiling")
    t.add_argument("--transports", default="tcp,ofi")
    t.add_argument("--ofi-provider", default="tcp;ofi_rxm")
    t.add_argument("--frame-kb", default="64,512")
    t.add_argument("--mib", type=int, default=256)
    t.add_argument("--runs", type=int, default=3)
    t.add_argument("--both-ways", action="store_true")
    t.add_argument("--emulate-hosts", action="store_true",
                   help="2 network namespaces joined by a veth link (root)")
    t.add_argument("--link-rate", default="none", help="with --emulate-hosts: e.g. 200mbit, or none")
    t.add_argument("--json", default=None)
    t.add_argument("--timeout", type=float, default=900)
    t.set_defaults(fn=lambda args: __import__("jax_jaccl.bench.transport", fromlist=["run"]).run(args))
    m = sub.add_parser("moe", help="MoE dispatch/combine vs a padded lax.all_to_all baseline; "
                                   "remote-first vs arrival combine on emulated hosts")
    m.add_argument("--nprocs", type=int, default=2)
    m.add_argument("--tokens", type=int, default=4096)
    m.add_argument("--hidden", default="1024,4096")
    m.add_argument("--experts", default="8,32")
    m.add_argument("--k", type=int, default=8)
    m.add_argument("--iters", type=int, default=5)
    m.add_argument("--runs", type=int, default=1)
    m.add_argument("--emulate-hosts", type=int, default=0)
    m.add_argument("--processes-per-host", type=int, default=2)
    m.add_argument("--link-rate", default="1gbit")
    m.add_argument("--slow-link-rate", default="400mbit")
    m.add_argument("--slow-local-us", type=int, default=0,
                   help="the last host pauses this long per token of local combine work")
    m.add_argument("--schedules", default="remote_first,arrival")
    m.add_argument("--plot", default=None)
    m.add_argument("--json", default=None)
    m.add_argument("--timeout", type=float, default=3600)
    m.set_defaults(fn=lambda args: __import__("jax_jaccl.bench.moe", fromlist=["run"]).run(args))
    o = sub.add_parser("overlap", help="compute hidden behind a collective, asynchronous vs "
                                       "blocking calls, on 2 rate-limited emulated hosts (root)")
    o.add_argument("--workload", choices=("collective", "step"), default="collective",
                   help="one all_reduce beside matmuls, or a training step reducing per layer")
    o.add_argument("--sizes", default="1M,16M,64M",
                   help="bytes per all_reduce (--workload step: per layer's weight)")
    o.add_argument("--layers", type=int, default=8, help="--workload step: layers of the MLP")
    o.add_argument("--link-rate", default="400mbit", help="per direction of the link")
    o.add_argument("--runs", type=int, default=3)
    o.add_argument("--iters", type=int, default=5)
    o.add_argument("--json", default=None)
    o.add_argument("--timeout", type=float, default=1800)
    o.set_defaults(fn=lambda args: __import__("jax_jaccl.bench.overlap", fromlist=["run"]).run(args))
    k = sub.add_parser("kernels", help="CUDA reduction and MoE kernels vs copy bandwidth and XLA, device time")
    k.add_argument("--sizes", default="256K,4M,64M,1G", help="reduction sizes (bytes per operand)")
    k.add_argument("--dtypes", default="float32,bfloat16")
    k.add_argument("--operands", default="2,4,8", help="reduction operand counts")
    k.add_argument("--iters", type=int, default=20, help="calls per timed round")
    k.add_argument("--rounds", type=int, default=5, help="timed rounds: the table shows median and min")
    k.add_argument("--tokens", type=int, default=4096)
    k.add_argument("--topk", type=int, default=8)
    k.add_argument("--hidden", default="7168,4096", help="MoE hidden sizes (DeepEP's)")
    k.set_defaults(fn=lambda args: __import__("jax_jaccl.bench.kernels", fromlist=["run"]).run(args))
    args = parser.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
