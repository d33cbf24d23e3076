"""jaccl-bench: measure jax_jaccl against its peers, nccl-tests style.

    jaccl-bench collectives [--nprocs 2] [--devices-per-process 1] [--sizes 4K,64K,1M,16M,64M]
                            [--ops all_reduce,reduce_scatter,all_gather,ppermute,ragged_all_to_all]
                            [--vs lax,lax_on_jaccl,mpi4jax,mpi,shm]
                            [--runs 3] [--algorithm auto] [--donate yes]
                            [--operand argument] [--plot FILE.png] [--json FILE]
    jaccl-bench collectives --emulate-hosts 4 --link-rate 200mbit --topology mesh
                            [--transports tcp,ofi] [--sizes ...] [--runs 1] [--plot FILE.png]
    jaccl-bench transport   [--transports tcp,ofi] [--frame-kb 64,512] [--both-ways]
                            [--emulate-hosts --link-rate none]   (see transport.py)
    jaccl-bench moe [...]   (see jax_jaccl/bench/moe.py)
    jaccl-bench overlap     [--sizes 1M,16M,64M] [--link-rate 400mbit] (see overlap.py)
    jaccl-bench kernels     (a GPU: see jax_jaccl/bench/kernels.py)

Each run starts one jaccl-run job (jax_jaccl, and jax's own collectives, gloo, for --vs lax); --vs
lax_on_jaccl times jax.lax's collectives on jaccl (--xla-collectives jaccl) in that job, or, with
--vs lax too, in one more; and,
for --vs mpi4jax/mpi, one mpirun job (Open MPI from apt; mpi4py and mpi4jax from the bench
extra; its processes get jaccl-run's glibc malloc tunables too), alternating so that both see the
same machine; --vs shm adds, for ppermute between 2 processes, a plain shared-memory copy of the
same bytes (shm_copy.py). The table shows medians over runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

from .. import _settings, launch
from . import jobs, report
from .sizes import DEFAULT_SIZES, EVERY_OP, OPS


# What the header says of buffers: XLA:CPU's own all-reduce and collective-permute never write
# over their operand, so where the input is donated XLA writes a temporary and copies it into the
# donated buffer; jaccl's all_reduce and ppermute write over theirs, so where it is not, XLA first
# copies the input into a fresh buffer.
DONATION = {"yes": "all_reduce and ppermute donate their input on every side (XLA's own ops "
                   "then add a copy back into it)",
            "no": "nothing donated (jaccl's all_reduce and ppermute then start with XLA's copy "
                  "of their input)"}

OPERAND = {"argument": "", "intermediate": "; every op takes an intermediate (its argument halved "
                                            "in the same program, as a training step's gradient)"}


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
    # Without --vs lax, jax.lax's ops run on jaccl in the job that times jaccl's own: both doors
    # to the engine in one job; with it, XLA's collectives there are gloo's, and jax.lax on
    # jaccl gets a job of its own.
    same_job = "lax_on_jaccl" in peers and "lax" not in peers
    jax_impls = ["jaccl"] + (["lax"] if "lax" in peers else []) + \
        (["lax_on_jaccl"] if same_job else []) + ["local"]
    if "ragged_all_to_all" in ops:
        jax_impls.insert(1, "jaccl_padded")
    shm = "shm" in peers and "ppermute" in ops and args.nprocs == 2 and args.devices_per_process == 1
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            where = ["-n", args.nprocs, "--devices-per-process", args.devices_per_process]
            work = ["--sizes", args.sizes, "--ops", args.ops]
            jax_work = work + ["--donate", args.donate, "--operand", args.operand] + \
                (["--engine-time"] if args.engine_time else [])
            out = os.path.join(tmp, f"jax{run}.json")
            records += jobs.run(jobs.launch(  # lax: JAX's own collectives
                where, "jax_jaccl.bench.collectives_worker",
                jax_work + ["--impls", ",".join(jax_impls), "--algorithm", args.algorithm,
                        "--output", out],
                xla_collectives="jaccl" if same_job else "gloo"), "collectives", output=out,
                timeout=args.timeout)
            if "lax_on_jaccl" in peers and not same_job:
                out = os.path.join(tmp, f"lax_on_jaccl{run}.json")
                records += jobs.run(jobs.launch(
                    where, "jax_jaccl.bench.collectives_worker",
                    jax_work + ["--impls", "lax_on_jaccl", "--output", out],
                    xla_collectives="jaccl"),
                    "lax_on_jaccl", output=out, timeout=args.timeout)
            if mpi_impls:
                out = os.path.join(tmp, f"mpi{run}.json")
                mpirun = ["mpirun", "-n", str(args.nprocs)]
                if os.geteuid() == 0:
                    mpirun.append("--allow-run-as-root")
                # glibc's malloc as in jaccl-run's jobs, so both sides are measured alike
                malloc = {"GLIBC_TUNABLES": os.environ.get("GLIBC_TUNABLES", "")}
                launch.with_malloc_tunables(malloc, _settings.read())
                records += jobs.run(mpirun + ["--oversubscribe", sys.executable, "-m",
                                              "jax_jaccl.bench.mpi_worker", *work, "--impls",
                                              ",".join(mpi_impls), "--output", out],
                                    "mpi", output=out, env=malloc, timeout=args.timeout)
            if shm:
                records += shm_records(args.sizes)
            print(f"run {run + 1}/{args.runs} done", file=sys.stderr, flush=True)
    impls = ["jaccl"] + [p for p in peers if p in jax_impls + mpi_impls + ["lax_on_jaccl"]] + \
        (["jaccl_padded"] if "jaccl_padded" in jax_impls else []) + (["shm"] if shm else [])
    ranks = args.nprocs * args.devices_per_process
    print(f"# jaccl-bench collectives: {args.nprocs} processes x {args.devices_per_process} "
          f"devices ({ranks} ranks), float32, median of {args.runs} runs; time per call, "
          "busbw in GB/s; " + DONATION[args.donate] + OPERAND[args.operand])
    print(report.table(records, impls, reference="local"))
    if args.plot:
        report.plot(records, impls, args.plot)
        print(f"\nplot: {args.plot}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaccl-bench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    fmt = argparse.ArgumentDefaultsHelpFormatter  # every option shows its default
    c = sub.add_parser("collectives", formatter_class=fmt,
                       help="all_reduce, reduce_scatter, all_gather, ppermute, ragged_all_to_all")
    c.add_argument("--nprocs", type=int, default=2, help="processes of the job on this machine")
    c.add_argument("--devices-per-process", type=int, default=1,
                   help="CPU devices per process (ranks = nprocs x this)")
    c.add_argument("--sizes", default=DEFAULT_SIZES,
                   help="comma list of message sizes, K/M/G suffixes (nccl-tests' S: the per-rank "
                        "buffer of all_reduce, the output of all_gather)")
    c.add_argument("--ops", default=",".join(OPS), help=f"comma list of {', '.join(EVERY_OP)}")
    c.add_argument("--vs", default="", help="comma list of peers timed in the same run: lax "
                   "(jax.lax on gloo), lax_on_jaccl (jax.lax on jaccl's mpiabi library), "
                   "mpi4jax, mpi (raw mpi4py on numpy; these two need `make bench-setup`), shm "
                   "(ppermute's plain shared-memory copy)")
    c.add_argument("--runs", type=int, default=3,
                   help="jobs per implementation, alternated; the table shows medians over them")
    c.add_argument("--algorithm", default="auto",
                   help="jaccl's algorithm: auto, naive, mesh, ring, ring_oneway, hierarchical, "
                        "cascade (naive and cascade are all_reduce's alone)")
    c.add_argument("--donate", choices=("yes", "no"), default="yes",
                   help="yes: all_reduce and ppermute donate their input, jaccl's and jax's alike "
                        "(a training step's habit); no: nothing is donated")
    c.add_argument("--operand", choices=("argument", "intermediate"), default="argument",
                   help="argument: each op takes the program's argument; intermediate: the "
                        "argument halved in the same program (as a training step's collective "
                        "takes a gradient), the same on every side")
    c.add_argument("--engine-time", action="store_true",
                   help="also the engine's own time per call, beside jaccl's and lax on jaccl's "
                        "(the rank least in the engine, median over calls): the rest of a "
                        "call's time is outside the engine")
    c.add_argument("--plot", default=None, metavar="FILE.png",
                   help="also draw bus bandwidth against size for every op and peer")
    c.add_argument("--json", default=None, metavar="FILE", help="also write every record")
    c.add_argument("--timeout", type=float, default=1800, help="seconds per job")
    c.add_argument("--emulate-hosts", type=int, default=0,
                   help="run all_reduce across N emulated hosts (root; see emulate.py)")
    c.add_argument("--link-rate", default="200mbit",
                   help="with --emulate-hosts: rate of every link, per direction (tc tbf)")
    c.add_argument("--topology", default="mesh", help="with --emulate-hosts: mesh (every pair "
                   "of hosts linked)")
    c.add_argument("--transports", default="tcp",
                   help="with --emulate-hosts: tcp (every algorithm), or e.g. tcp,ofi (mesh "
                        "all_reduce over each, side by side)")
    c.add_argument("--ofi-provider", default="tcp;ofi_rxm",
                   help="libfabric provider for the ofi transport (JACCL_OFI_PROVIDER)")
    c.set_defaults(fn=collectives)
    t = sub.add_parser("transport", formatter_class=fmt,
                       help="frames between two hosts, no collective: each transport's ceiling")
    t.add_argument("--transports", default="tcp,ofi", help="comma list of tcp, ofi")
    t.add_argument("--ofi-provider", default="tcp;ofi_rxm",
                   help="libfabric provider for the ofi transport (JACCL_OFI_PROVIDER)")
    t.add_argument("--frame-kb", default="64,512", help="comma list of frame sizes (JACCL_FRAME_KB)")
    t.add_argument("--mib", type=int, default=256, help="MiB sent per measurement")
    t.add_argument("--runs", type=int, default=3, help="measurements per transport and frame size")
    t.add_argument("--both-ways", action="store_true", help="both hosts send at once")
    t.add_argument("--emulate-hosts", action="store_true",
                   help="2 network namespaces joined by a veth link (root)")
    t.add_argument("--link-rate", default="none", help="with --emulate-hosts: e.g. 200mbit, or none")
    t.add_argument("--json", default=None, metavar="FILE", help="also write every record")
    t.add_argument("--timeout", type=float, default=900, help="seconds per job")
    t.set_defaults(fn=lambda args: __import__("jax_jaccl.bench.transport", fromlist=["run"]).run(args))
    m = sub.add_parser("moe", formatter_class=fmt,
                       help="MoE dispatch/combine vs a padded lax.all_to_all baseline and the "
                            "memory bound; remote-first vs arrival combine on emulated hosts")
    m.add_argument("--nprocs", type=int, default=2, help="processes (one device each)")
    m.add_argument("--tokens", type=int, default=4096, help="tokens per rank (T)")
    m.add_argument("--hidden", default="1024,4096", help="comma list of hidden sizes (H)")
    m.add_argument("--experts", default="8,32", help="comma list of expert counts (E)")
    m.add_argument("--k", type=int, default=8, help="experts per token (top-k)")
    m.add_argument("--iters", type=int, default=5, help="timed calls per job")
    m.add_argument("--runs", type=int, default=1, help="jobs; the table shows the median")
    m.add_argument("--emulate-hosts", type=int, default=0,
                   help="compare the combine schedules across N emulated hosts (root)")
    m.add_argument("--processes-per-host", type=int, default=2, help="with --emulate-hosts")
    m.add_argument("--link-rate", default="1gbit", help="with --emulate-hosts: every link's rate")
    m.add_argument("--slow-link-rate", default="400mbit",
                   help="with --emulate-hosts: the last host's links")
    m.add_argument("--slow-local-us", type=int, default=0,
                   help="with --emulate-hosts: the last host pauses this long per token of "
                        "local combine work")
    m.add_argument("--schedules", default="remote_first,arrival",
                   help="with --emulate-hosts: comma list of JACCL_MOE_SCHEDULE values")
    m.add_argument("--plot", default=None, metavar="FILE.png",
                   help="also draw the table: time per op against the baseline and the bound "
                        "(with --emulate-hosts: combine time per rank and schedule)")
    m.add_argument("--json", default=None, metavar="FILE", help="also write every record")
    m.add_argument("--timeout", type=float, default=3600, help="seconds per job")
    m.set_defaults(fn=lambda args: __import__("jax_jaccl.bench.moe", fromlist=["run"]).run(args))
    o = sub.add_parser("overlap", formatter_class=fmt,
                       help="compute hidden behind a collective, asynchronous vs blocking calls, "
                            "on 2 rate-limited emulated hosts (root)")
    o.add_argument("--workload", choices=("collective", "step"), default="collective",
                   help="one all_reduce beside matmuls, or a training step reducing per layer")
    o.add_argument("--sizes", default="1M,16M,64M",
                   help="bytes per all_reduce (--workload step: per layer's weight)")
    o.add_argument("--layers", type=int, default=8, help="--workload step: layers of the MLP")
    o.add_argument("--link-rate", default="400mbit", help="per direction of the link")
    o.add_argument("--runs", type=int, default=3, help="jobs per mode; the table shows medians")
    o.add_argument("--iters", type=int, default=5, help="timed calls per job")
    o.add_argument("--json", default=None, metavar="FILE", help="also write every record")
    o.add_argument("--timeout", type=float, default=1800, help="seconds per job")
    o.set_defaults(fn=lambda args: __import__("jax_jaccl.bench.overlap", fromlist=["run"]).run(args))
    k = sub.add_parser("kernels", formatter_class=fmt,
                       help="CUDA reduction and MoE kernels vs copy bandwidth and XLA, device time")
    k.add_argument("--sizes", default="256K,4M,64M,1G", help="reduction sizes (bytes per operand)")
    k.add_argument("--dtypes", default="float32,bfloat16", help="comma list of element types")
    k.add_argument("--operands", default="2,4,8", help="reduction operand counts")
    k.add_argument("--iters", type=int, default=20, help="calls per timed round")
    k.add_argument("--rounds", type=int, default=5, help="timed rounds: the table shows median and min")
    k.add_argument("--tokens", type=int, default=4096, help="MoE tokens")
    k.add_argument("--topk", type=int, default=8, help="MoE experts per token")
    k.add_argument("--hidden", default="7168,4096", help="MoE hidden sizes (DeepEP's)")
    k.set_defaults(fn=lambda args: __import__("jax_jaccl.bench.kernels", fromlist=["run"]).run(args))
    return parser


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
