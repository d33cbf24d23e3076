"""Runs a worker script as a multi-process job with jaccl-run (on this machine, or across
emulated hosts with a hostfile) and collects what each rank printed; optionally does something
to the job (kill a host, cut a link) once every rank printed a given line. Every job has a hard
timeout; the whole process group is killed when it passes or anything else ends the wait (a
pytest-timeout), and the caller can check that no process and no shared-memory segment of the
job is left.
JACCL_TEST_WORKER_PREFIX (e.g. "cuda-gdb -batch -ex run -ex bt --args") is a command every
worker runs under: run_on_gpu.sh uses it for the backtrace of a crash."""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).parents[2]
WORKERS = REPO / "tests" / "workers"


@dataclasses.dataclass
class Job:
    returncode: int
    output: str
    seconds: float
    job_id: str
    marker: str

    def lines(self, rank: int) -> list[str]:
        prefix = f"[{rank}] "
        return [l[len(prefix):] for l in self.output.splitlines() if l.startswith(prefix)]

    def values(self, rank: int, key: str) -> list[str]:
        """Payloads of lines `KEY payload` printed by `rank`."""
        return [l[len(key) + 1:] for l in self.lines(rank) if l.startswith(key + " ")]

    def raised(self, rank: int) -> tuple[float, str]:
        """(seconds, message) of the rank's `RAISED <seconds> <message>` line (the workers'
        report of a collective that failed); the test fails if the rank printed none."""
        lines = self.values(rank, "RAISED")
        assert lines, f"rank {rank} did not raise:\n{clean(self.output)[-4000:]}"
        seconds, message = lines[0].split(" ", 1)
        return float(seconds), message

    def leftovers(self) -> list[str]:
        shm = [p for p in os.listdir("/dev/shm") if p.startswith(f"jaccl-{self.job_id}")]
        procs = subprocess.run(["pgrep", "-f", self.marker], capture_output=True, text=True).stdout
        return shm + [f"pid {p}" for p in procs.split()]


def worker_prefix() -> list[str]:
    return shlex.split(os.environ.get("JACCL_TEST_WORKER_PREFIX", ""))


def run_job(worker: str, nprocs: int, devices: int = 1, args=(), env=None, timeout: float = 240,
            grace: float | None = None, hostfile: str | None = None, when: str | None = None,
            action=None, xla_collectives: str | None = "gloo", keep_going: bool = False,
            restarts: int = 0) -> Job:
    """`nprocs` processes of `devices` devices each; with `hostfile` (jaccl-run's), its hosts
    and processes instead. `action()` runs once, when every rank printed a line starting with
    `when`. The collectives XLA emits (the workers' jax.lax references) stay on gloo unless
    `xla_collectives` says "jaccl" (None: jaccl-run's default): a reference on jaccl's engine
    would share jaccl's mistakes. `keep_going`: jaccl-run --keep-going (`restarts`: --restarts)."""
    job_id = secrets.token_hex(4)
    marker = f"jaccl-test-{job_id}"
    cmd = [sys.executable, "-m", "jax_jaccl.launch", "--devices-per-process", str(devices)]
    cmd += ["--hostfile", hostfile] if hostfile else ["-n", str(nprocs)]
    if grace is not None:
        cmd += ["--grace", str(grace)]
    if keep_going:
        cmd += ["--keep-going"] + (["--restarts", str(restarts)] if restarts else [])
    if xla_collectives is not None:
        cmd += ["--xla-collectives", xla_collectives]
    cmd += ["--", *worker_prefix(), sys.executable, str(WORKERS / worker), "--marker", marker,
            *map(str, args)]
    full_env = dict(os.environ, JACCL_JOB_ID=job_id)  # PYTHONPATH has tests/support: conftest.py
    full_env.update(env or {})
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full_env,
                            start_new_session=True, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=_read, args=(proc, lines, nprocs, when, action), daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout)
    except BaseException as e:  # our timeout, pytest-timeout's, an interrupt: kill it all
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        subprocess.run(["pkill", "-9", "-f", marker])
        reader.join(timeout=5)
        if isinstance(e, subprocess.TimeoutExpired):
            raise AssertionError(f"job {worker} {args} did not finish in {timeout} s:\n"
                                 f"{''.join(lines)[-4000:]}") from None
        raise
    reader.join(timeout=10)
    job = Job(proc.returncode, "".join(lines), time.monotonic() - start, job_id, marker)
    deadline = time.monotonic() + 5
    while job.leftovers() and time.monotonic() < deadline:
        time.sleep(0.1)
    return job


def _read(proc, lines: list, nprocs: int, when: str | None, action) -> None:
    ranks_seen = set()
    for line in proc.stdout:
        lines.append(line)
        if when and line.split("] ", 1)[-1].startswith(when):
            ranks_seen.add(line.split("]", 1)[0])
            if len(ranks_seen) == nprocs and action:
                action()
                action = None


def job_env(timeout: float, hosts: dict | None = None, nprocs: int = 2, **settings) -> dict:
    """JACCL_TIMEOUT=`timeout` and `settings` for a job of `nprocs` processes: with `hosts` (a
    transport's settings, tests/support/transports.py) every process on an emulated host of its
    own, without them all on this one."""
    hosts_env = {"JACCL_TEST_FAKE_HOSTS": str(nprocs), **hosts} if hosts else {
        "JACCL_TEST_FAKE_HOSTS": "0"}
    return {"JACCL_TIMEOUT": str(timeout), **hosts_env, **settings}


def clean(output: str) -> str:
    """Output without JAX's and gloo's chatter (and native stack frames), for assertion
    messages."""
    return "\n".join(l for l in output.splitlines()
                     if not re.search(r"Gloo|^\[\d\] [IWE]\d{4}|^\[\d\] +@", l))


def jaccl_run(*args, timeout: float = 120, env=None) -> subprocess.CompletedProcess:
    """jaccl-run with `args` (options, then `--` and a command), its output captured."""
    return subprocess.run([sys.executable, "-m", "jax_jaccl.launch", *args], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, **(env or {})))

