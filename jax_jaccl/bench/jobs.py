"""How jaccl-bench's subcommands run their measurements: each one a job of its own.

Contract: run(command, what, output=..., env=..., timeout=...) runs `command` (a jaccl-run or
mpirun line, built by launch() or by hand) with `env` added to this process's environment and
returns the records its worker wrote: the JSON list in the file `output` (the workers'
--output). A job that
fails (its exit status, or no records) ends the bench: SystemExit naming `what`, the tail of
its output on stderr and the whole of it in jaccl-bench-<what>-failed.log in the current
directory. launch(...) builds the jaccl-run line that starts a bench worker module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def launch(where: list, module: str, args: list, xla_collectives: str | None = None) -> list[str]:
    """`python -m jax_jaccl.launch <where> [--xla-collectives X] -- python -m <module> <args>`;
    `where` is jaccl-run's placement: ["-n", "2", ...] or ["--hostfile", path]."""
    cmd = [sys.executable, "-m", "jax_jaccl.launch", *[str(a) for a in where]]
    if xla_collectives:
        cmd += ["--xla-collectives", xla_collectives]
    return cmd + ["--", sys.executable, "-m", module, *[str(a) for a in args]]


def run(command: list[str], what: str, *, output: str, env: dict | None = None,
        timeout: float) -> list[dict]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))
    records = []
    if done.returncode == 0 and os.path.exists(output):
        with open(output) as f:
            records = json.load(f)
    if done.returncode != 0 or not records:
        log = os.path.abspath(f"jaccl-bench-{what.replace(' ', '-')}-failed.log")
        with open(log, "w") as f:
            f.write(done.stdout + done.stderr)
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        missing = ", no results" if done.returncode == 0 else ""
        raise SystemExit(f"jaccl-bench: the {what} job failed (exit status {done.returncode}"
                         f"{missing}); its output is in {log}")
    return records
