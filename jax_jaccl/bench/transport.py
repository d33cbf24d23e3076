"""jaccl-bench transport: the ceiling of each transport between hosts, with no collective:
frames of JACCL_FRAME_KB written and credited between two processes on different hosts
(transport_worker.py), for each transport and frame size, side by side in one run.

    jaccl-bench transport [--transports tcp,ofi] [--ofi-provider 'tcp;ofi_rxm']
                          [--frame-kb 64,512] [--mib 256] [--runs 3] [--both-ways]
                          [--emulate-hosts --link-rate 200mbit|none]

Without --emulate-hosts the two processes share this machine (loopback) with host ids of
their own; with it they run in two network namespaces joined by a veth link (root), rate-
limited by --link-rate or unlimited ("none"). The table shows the median GB/s received per
direction over --runs measurements of --mib MiB each.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile

from . import jobs


def transport_env(name: str, provider: str) -> dict:
    if name == "tcp":
        return {"JACCL_TRANSPORT": "tcp"}
    if name == "ofi":
        return {"JACCL_TRANSPORT": "ofi", "JACCL_OFI_PROVIDER": provider}
    raise SystemExit(f"jaccl-bench: unknown transport {name!r} (tcp, ofi)")


def run(args) -> None:
    transports = [t for t in args.transports.split(",") if t]
    frames = [int(kb) for kb in args.frame_kb.split(",") if kb]
    work = ["--mib", args.mib, "--runs", args.runs] + (["--both-ways"] if args.both_ways else [])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        hosts = None
        if args.emulate_hosts:
            from .._emulated_hosts import EmulatedHosts, can_emulate

            reason = can_emulate()
            if reason:
                raise SystemExit(f"jaccl-bench: {reason}")
            rate = None if args.link_rate in ("", "none") else args.link_rate
            hosts = EmulatedHosts(2, rate=rate)
            where = ["--hostfile", hosts.write_hostfile(os.path.join(tmp, "hosts.json"), 1)]
        else:
            where = ["-n", "2"]
            work.append("--separate-hosts")
        try:
            for kb in frames:
                for name in transports:
                    env = dict(transport_env(name, args.ofi_provider), JACCL_FRAME_KB=str(kb))
                    out = os.path.join(tmp, f"{name}-{kb}.json")
                    cmd = jobs.launch(where, "jax_jaccl.bench.transport_worker", work + ["--output", out])
                    for r in jobs.run(cmd, f"transport {name}", output=out, env=env,
                                      timeout=args.timeout):
                        rows.append(dict(r, name=name))
                    print(f"{name} {kb} KiB done", file=sys.stderr, flush=True)
        finally:
            if hosts is not None:
                hosts.close()
    where = (f"2 emulated hosts, link {args.link_rate}" if args.emulate_hosts
             else "2 processes on this machine (loopback)")
    print(f"# jaccl-bench transport: {where}, frames {'both ways' if args.both_ways else 'one way'}, "
          f"{args.mib} MiB per measurement, median of {args.runs}; GB/s received per direction")
    print(table(rows, transports, frames))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def table(rows, transports, frames) -> str:
    def rate(name, kb):
        values = [g for r in rows if r["name"] == name and r["frame_kb"] == kb for g in r["gbps"]]
        return statistics.median(values) if values else None

    header = ["frame"] + [f"{t} GB/s" for t in transports]
    if len(transports) == 2:
        header.append(f"{transports[1]} / {transports[0]}")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for kb in frames:
        rates = [rate(t, kb) for t in transports]
        row = [f"{kb} KiB"] + [f"{r:.2f}" if r else "—" for r in rates]
        if len(transports) == 2:
            row.append(f"{rates[1] / rates[0]:.2f}x" if all(rates) else "—")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)
