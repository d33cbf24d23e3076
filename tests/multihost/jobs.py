"""Runs a worker across emulated hosts with jaccl-run --hostfile, optionally doing something
to the hosts (kill one, cut a link) once every rank printed a given line; collects the
output per rank. Every job has a hard timeout and is killed whole when it passes."""

from __future__ import annotations

import dataclasses
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).parents[2]
WORKERS = REPO / "tests" / "processes" / "workers"


@dataclasses.dataclass
class HostJob:
    returncode: int
    output: str
    job_id: str

    def lines(self, rank):
        prefix = f"[{rank}] "
        return [l[len(prefix):] for l in self.output.splitlines() if l.startswith(prefix)]

    def values(self, rank, key):
        return [l[len(key) + 1:] for l in self.lines(rank) if l.startswith(key + " ")]

    def shm_left(self):
        return [p for p in os.listdir("/dev/shm") if p.startswith(f"jaccl-{self.job_id}")]


def run_on_hosts(hosts, per_host, worker, args=(), env=None, timeout=300, when=None, action=None,
                 grace=None):
    """`action()` runs once every rank printed a line starting with `when`."""
    hostfile = hosts.write_hostfile(f"/tmp/{hosts.prefix}.json", per_host)
    job_id = secrets.token_hex(4)
    cmd = [sys.executable, "-m", "jax_jaccl.launch", "--hostfile", hostfile]
    if grace is not None:
        cmd += ["--grace", str(grace)]
    cmd += ["--", sys.executable, str(WORKERS / worker), *map(str, args)]
    full_env = dict(os.environ, JACCL_JOB_ID=job_id,
                    PYTHONPATH=os.pathsep.join([str(REPO / "tests" / "support"),
                                                os.environ.get("PYTHONPATH", "")]))
    full_env.update(env or {})
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=full_env, start_new_session=True)
    lines, ranks_seen = [], set()
    nprocs = hosts.n * per_host

    def read():
        for line in proc.stdout:
            lines.append(line)
            if when and line.split("] ", 1)[-1].startswith(when):
                ranks_seen.add(line.split("]", 1)[0])
                if len(ranks_seen) == nprocs and action:
                    action()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        reader.join(timeout=5)
        raise AssertionError(f"job did not finish in {timeout} s:\n{''.join(lines)[-4000:]}")
    reader.join(timeout=10)
    os.unlink(hostfile)
    return HostJob(proc.returncode, "".join(lines), job_id)
