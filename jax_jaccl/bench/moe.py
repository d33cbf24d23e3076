"""jaccl-bench moe: MoE dispatch and combine against a pure-JAX baseline, and the
remote-first combine schedule against arrival order on emulated hosts.

    jaccl-bench moe [--nprocs 2] [--tokens 4096] [--hidden 1024,4096] [--experts 8,32] [--k 8]
    jaccl-bench moe --emulate-hosts 2 --processes-per-host 2 --link-rate 1gbit
                    --slow-link-rate 400mbit [--tokens 1024] [--hidden 1024] [--experts 8]

The first times dispatch and combine (bf16, top-k routing drawn at random) with jaccl and
with lax.all_to_all of per-destination blocks padded to capacity, in one job, and jaccl's FP8
dispatch (fp8=True: quantised on the send path). GB/s counts one row per routed (token,
expert), as DeepEP does (an FP8 row: H bytes of values and H / 128 float32 scales, against
2 H of bf16); rows to experts on the same host and on other hosts are shown apart. The
memory bound, run by every rank at once with no communication: for dispatch a plain copy of
the T * K rows it writes (np.copyto into a preallocated buffer), for combine the weighted sum
fused by XLA over T * K distinct rows; "jaccl / bound" is how far jaccl is from it.

The second runs combine under JACCL_MOE_SCHEDULE=remote_first and =arrival on emulated hosts
whose last host sends through a slower link, and reports each rank's combine time:
remote-first should lower the slowest rank's time and the spread.
"""

from __future__ import annotations

import json
import os
import tempfile

from .._emulated_hosts import EmulatedHosts, can_emulate
from . import jobs
from .moe_worker import STEADY_ROUNDS


def _worker(where, args, impls, out, env=None, xla_collectives=None):
    return jobs.run(jobs.launch(where, "jax_jaccl.bench.moe_worker",
                                ["--tokens", args.tokens, "--hidden", args.hidden, "--experts",
                                 args.experts, "--k", args.k, "--impls", impls, "--iters",
                                 args.iters, "--output", out], xla_collectives=xla_collectives),
                    "moe", output=out, env=env, timeout=args.timeout)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def by_case(records):
    """(impl, H, E, op) -> the record of the median run (the slowest rank's median each)."""
    runs = {}
    for r in records:
        runs.setdefault((r["impl"], r["hidden"], r["experts"], r["op"]), []).append(r)
    return {key: sorted(rs, key=lambda r: r["median_s"])[len(rs) // 2] for key, rs in runs.items()}


def throughput_table(records) -> str:
    keyed = by_case(records)
    bounded = any(impl == "bound" for impl, *_ in keyed)
    lines = ["| H | E | op | jaccl | jaccl GB/s (intra + inter) | lax.all_to_all padded | baseline GB/s | speed-up |"
             + (" memory bound | jaccl / bound |" if bounded else ""),
             "|---|---|---|---|---|---|---|---|" + ("---|---|" if bounded else "")]
    for (impl, h, e, op), r in sorted(keyed.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][3])):
        if impl != "jaccl":
            continue
        base = keyed.get(("lax", h, e, op.split()[0]))  # dispatch fp8: against lax's bf16 one
        gbps = lambda rec: (rec["intra_bytes"] + rec["inter_bytes"]) / rec["median_s"] / 1e9  # noqa: E731
        lines.append(
            f"| {h} | {e} | {op} | {_ms(r['median_s'])} | {gbps(r):.2f} "
            f"({r['intra_bytes'] / r['median_s'] / 1e9:.2f} + {r['inter_bytes'] / r['median_s'] / 1e9:.2f}) | "
            + (f"{_ms(base['median_s'])} | {gbps(base):.2f} | {base['median_s'] / r['median_s']:.1f}x |"
               if base else "— | — | — |"))
        if bounded:
            bound = keyed.get(("bound", h, e, op))
            lines[-1] += (f" {_ms(bound['median_s'])} | {r['median_s'] / bound['median_s']:.2f}x |"
                          if bound else " — | — |")
    return "\n".join(lines)


def schedule_table(by_schedule) -> str:
    lines = ["| schedule | combine time per rank | slowest | spread (max - min) |", "|---|---|---|---|"]
    for schedule, per_rank in by_schedule.items():
        lines.append(f"| {schedule} | {', '.join(_ms(t) for t in per_rank)} | {_ms(max(per_rank))} | "
                     f"{_ms(max(per_rank) - min(per_rank))} |")
    return "\n".join(lines)


def plot_throughput(records, path: str) -> None:
    """Time of every op (H, E) for jaccl, the padded lax.all_to_all layer and the memory
    bound, side by side on a log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keyed = by_case(records)
    cases = sorted({(h, e, op) for impl, h, e, op in keyed if impl == "jaccl"})
    impls = (("jaccl", "jaccl"), ("lax", "lax.all_to_all padded"), ("bound", "memory bound"))
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(cases)), 4))
    width = 0.8 / len(impls)
    for i, (impl, label) in enumerate(impls):
        times = [keyed.get((impl, h, e, op.split()[0] if impl == "lax" else op)) for h, e, op in cases]
        ax.bar([c + i * width for c in range(len(cases))],
               [r["median_s"] * 1e3 if r else 0 for r in times], width, label=label)
    ax.set_xticks([c + width for c in range(len(cases))])
    ax.set_xticklabels([f"{op}\nH={h} E={e}" for h, e, op in cases], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("time per call (ms)")
    ax.set_title("MoE dispatch / combine, slowest rank")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def plot_schedules(by_schedule, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.8 / len(by_schedule)
    for i, (schedule, per_rank) in enumerate(by_schedule.items()):
        ax.bar([r + i * width for r in range(len(per_rank))], [t * 1e3 for t in per_rank],
               width, label=schedule)
    ax.set_xticks([r + width * (len(by_schedule) - 1) / 2 for r in range(len(per_rank))])
    ax.set_xticklabels([f"rank {r}" for r in range(len(per_rank))])
    ax.set_ylabel("combine time (ms)")
    ax.set_title("MoE combine per rank, emulated hosts, last host slowed")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if not args.emulate_hosts:
            records = []
            for i in range(args.runs):  # the lax baseline: JAX's own collectives (gloo)
                records += _worker(["-n", args.nprocs], args, "jaccl,jaccl_fp8,lax,bound",
                                   os.path.join(tmp, f"{i}.json"), xla_collectives="gloo")
            print(f"# jaccl-bench moe: {args.nprocs} processes x 1 device, T={args.tokens} tokens "
                  f"per rank, K={args.k}, bf16, capacity factor 1.5; slowest rank's median, timed once "
                  f"no process's memory grew for {STEADY_ROUNDS} rounds in a row")
            print(throughput_table(records))
            if args.plot:
                plot_throughput(records, args.plot)
                print(f"\nplot: {args.plot}")
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(records, f, indent=1)
            return
        reason = can_emulate()
        if reason:
            raise SystemExit(f"jaccl-bench: {reason}")
        slow = {args.emulate_hosts - 1: args.slow_link_rate} if args.slow_link_rate else {}
        by_schedule = {}
        with EmulatedHosts(args.emulate_hosts, rate=args.link_rate, egress=slow) as hosts:
            spec = hosts.hostfile(args.processes_per_host)
            if args.slow_local_us:  # the last host is also slower at its local work
                spec["hosts"][-1]["env"] = {"JACCL_MOE_LOCAL_DELAY_US": args.slow_local_us}
            hostfile = os.path.join(tmp, "hosts.json")
            with open(hostfile, "w") as f:
                json.dump(spec, f)
            for schedule in args.schedules.split(","):
                runs = [_worker(["--hostfile", hostfile], args, "jaccl",
                                os.path.join(tmp, f"{schedule}{i}.json"),
                                env={"JACCL_MOE_SCHEDULE": schedule}) for i in range(args.runs)]
                combine = [r for run in runs for r in run if r["op"] == "combine"]
                per_rank = [sorted(rec["per_rank_s"][p] for rec in combine)[len(combine) // 2]
                            for p in range(len(combine[0]["per_rank_s"]))]
                by_schedule[schedule] = per_rank
        print(f"# jaccl-bench moe --emulate-hosts {args.emulate_hosts} --processes-per-host "
              f"{args.processes_per_host} --link-rate {args.link_rate} --slow-link-rate "
              f"{args.slow_link_rate} --slow-local-us {args.slow_local_us}: combine, T={args.tokens}, H={args.hidden}, "
              f"E={args.experts}, K={args.k}, median of {args.runs} runs x {args.iters} calls")
        print(schedule_table(by_schedule))
        if args.plot:
            plot_schedules(by_schedule, args.plot)
            print(f"\nplot: {args.plot}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(by_schedule, f, indent=1)
