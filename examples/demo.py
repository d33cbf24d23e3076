"""make demo: the data-parallel training example (train_data_parallel.py) for two layouts of
this machine, each run twice with jaccl-run, so that jax.lax's step runs once on JAX's own
collectives (gloo) and once on jaccl's engine; then the median step times side by side.

    python examples/demo.py [--layouts 2x2,4x1] [--seconds 20] [any train_data_parallel.py option]

A layout PxD is P processes of D CPU devices. Every job checks each jaccl step against the
jax.lax step from the same state (bit for bit where both run on jaccl's engine, within
float32's summation-order bound on gloo) and fails where they differ; so does this script,
after the table.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent


def run_job(layout: str, carrier: str, extra: list, out: pathlib.Path) -> dict | None:
    processes, devices = layout.split("x")
    print(f"\n== {processes} processes x {devices} device(s), jax.lax on {carrier} ==", flush=True)
    cmd = [sys.executable, "-m", "jax_jaccl.launch", "-n", processes, "--devices-per-process",
           devices, "--xla-collectives", carrier, "--", sys.executable,
           str(HERE / "train_data_parallel.py"), "--json", str(out), *extra]
    if subprocess.run(cmd).returncode != 0 or not out.exists():
        return None
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layouts", default="2x2,4x1", help="comma list of PROCESSESxDEVICES")
    args, extra = parser.parse_known_args()
    rows, failed = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for layout in args.layouts.split(","):
            jobs = {carrier: run_job(layout, carrier, extra, pathlib.Path(tmp) / f"{layout}-{carrier}.json")
                    for carrier in ("gloo", "jaccl")}
            failed += [f"{layout} with jax.lax on {c}" for c, job in jobs.items() if not job or not job["ok"]]
            if all(jobs.values()):
                rows.append((layout.replace("x", " x "), jobs))
    if rows:
        first = rows[0][1]["gloo"]
        print(f"\nMedian step time, {first['params']:,} parameters (jaccl's step and jax.lax's, "
              "the same model, data and state, taking turns in each job):\n")
        print("| layout | jax.lax on gloo | jaccl, same job | gloo / jaccl | jax.lax on jaccl | "
              "jaccl, same job |")
        print("|---|---|---|---|---|---|")
        ms = lambda seconds: f"{seconds * 1e3:.1f} ms"  # noqa: E731
        for layout, jobs in rows:
            gloo, on_jaccl = jobs["gloo"], jobs["jaccl"]
            print(f"| {layout} | {ms(gloo['lax_s'])} | {ms(gloo['jaccl_s'])} | "
                  f"{gloo['lax_s'] / gloo['jaccl_s']:.2f}x | {ms(on_jaccl['lax_s'])} | "
                  f"{ms(on_jaccl['jaccl_s'])} |")
    if failed:
        sys.exit("demo: failed: " + "; ".join(failed))
    print("\nOK: every job's jaccl and jax.lax steps agree (bit for bit on one engine, within "
          "float32's summation-order bound on gloo)")


if __name__ == "__main__":
    main()
