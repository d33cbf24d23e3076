"""The parent side of a `jax_processes` job: the pytest item that stands for a marked test and
runs it in N fresh processes.

Contract: JobItem keeps the marked test's node id (so -x, -k, --lf, junitxml and xdist see one
test) and runs no fixture in the pytest process. runtest() waits for process slots (slots.py:
at most `jax_processes_max` rank processes on the machine at once), then starts the ranks, each
a `python -m pytest <the one test>` with JACCL_* set as jaccl-run sets them, the session's
compilation cache (compile_cache.py: not for a gloo job on a jax whose gloo hangs on it) and
the marker's env (rank.py runs there), its stdout and stderr in <job>/rank<k>.log; waits for
all of them, or for the first failure plus a grace, or for the timeout; then, for every rank still running, asks faulthandler for its stacks
(SIGUSR1), waits a moment and kills its process group. It always removes what the job made:
processes, /dev/shm/jaccl-<job>-* segments, namespaces, the port reservation and the job
folder, whether the test passed, failed, was skipped or killed (what a failure report shows
is read from the folder first). The test passes when every rank passed; is skipped when every rank
skipped; else fails with one JobFailed naming the first failing rank, which repr_failure
renders rank by rank (its traceback, or how it ended and its last output, and the stacks of the
ranks that hung). A passing job whose XLA collectives ran on jaccl by default (not asked for)
while its test also ran jaccl's own ops warns (LaxOnJacclWarning): its jax.lax was jaccl too.
"""

from __future__ import annotations

import glob
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .. import _xla_collectives
from ..launch import signal_name
from .compile_cache import cache_env
from .placement import NoNamespaces, Placement
from .rank import FAILED_FLAG, class_name
from .slots import hold_slots


class LaxOnJacclWarning(pytest.PytestWarning):
    """A job ran jaccl's ops and jax.lax's collectives on jaccl's engine without being asked."""


GRACE_S = 5.0   # how long the other ranks may still report after one failed
LOG_TAIL = 40   # lines of a rank's output shown when it failed without a traceback


@dataclass
class RankResult:
    rank: int
    host: int
    pid: int
    returncode: int | None = None  # None: killed by the job (hung or stopped)
    phases: list = field(default_factory=list)
    log: str = ""
    stacks: str = ""
    stopped_by_job: bool = False

    def phase(self, when):
        return next((p for p in self.phases if p["when"] == when), None)

    @property
    def status(self) -> str:
        if any(p["outcome"] == "failed" for p in self.phases):
            return "failed"
        setup, call = self.phase("setup"), self.phase("call")
        if setup and setup["outcome"] == "skipped":
            return "skipped"
        if call and call["outcome"] == "skipped":
            return "skipped"
        if self.stopped_by_job:
            return "hung (stopped by the job)" if call is None else "passed, then stopped by the job at exit"
        if self.returncode != 0 and self.returncode is not None:
            return f"exited with {_exit_text(self.returncode)}"
        if call is None:
            return "ended without running the test"
        return "passed"

    def headline(self) -> str:
        """The failure in one line: the exception, or where a hung rank was."""
        text = "\n".join(p["text"] for p in self.phases if p["outcome"] == "failed")
        error = [l[1:].strip() for l in text.splitlines() if l.startswith("E ")]
        if error:
            return error[0]
        frames = [l.strip() for l in self.stacks.splitlines() if l.strip().startswith("File ")]
        if frames:
            return "at " + frames[0]
        lines = [l for l in (text or self.log).splitlines() if l.strip()]
        return lines[-1].strip() if lines else ""

    def explanation(self) -> str:
        failed = [p for p in self.phases if p["outcome"] == "failed"]
        if failed:
            return "\n".join(f"[{p['when']}]\n{p['text']}" for p in failed)
        tail = "\n".join(self.log.splitlines()[-LOG_TAIL:])
        return f"{self.status}; its last output:\n{tail}" if tail else self.status


def _exit_text(code: int) -> str:
    if code < 0:
        name = signal_name(-code)
        return name if name.startswith("signal ") else f"signal {name}"
    return f"status {code}"


class JobFailed(Exception):
    def __init__(self, ranks: list, first: RankResult, placement: str):
        self.ranks, self.first, self.placement = ranks, first, placement
        super().__init__(f"rank {first.rank}/{len(ranks)} {first.status}: {first.headline()}")


class JobItem(pytest.Item):
    """A marked test, run as a job of several processes."""

    def __init__(self, *, function: pytest.Function, processes: int, devices_per_process: int,
                 hosts: int, timeout: float, link_rate: str | None, network: str, env: dict, ranks: str,
                 xla_collectives: str, xla_collectives_by_default: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.function = function
        self.processes, self.devices_per_process = processes, devices_per_process
        self.hosts, self.timeout, self.link_rate = hosts, timeout, link_rate
        self.network, self.extra_env, self.rank_order = network, env, ranks
        self.xla_collectives = xla_collectives
        self.xla_collectives_by_default = xla_collectives_by_default
        self.own_markers = list(function.own_markers)
        self.keywords.update(function.keywords)
        self.obj = getattr(function, "obj", None)

    def reportinfo(self):
        return self.function.reportinfo()

    def _target(self) -> str:
        names = []
        node = self.function
        while node is not None and not isinstance(node, pytest.Module):
            names.append(node.name)
            node = node.parent
        return "::".join([str(self.function.path)] + names[::-1])

    def _rank_command(self, rank: int, job: Path) -> list:
        return [sys.executable, "-m", "pytest", self._target(), "-p", "no:xdist", "-p", "no:cacheprovider",
                "-o", "addopts=", "-o", "faulthandler_timeout=0", "-s", "-p", "no:terminal",
                "--rootdir", str(self.config.rootpath), "--basetemp", str(job / f"rank{rank}" / "tmp"),
                "--runxfail"] + (["-o", "timeout=0"] if self.config.pluginmanager.hasplugin("timeout") else [])

    def _rank_env(self, rank: int, job: Path, job_id: str, placement: Placement) -> dict:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYTEST_XDIST", "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST"))}
        env.update(cache_env(self.config, self.xla_collectives))
        # As jaccl-run does, before the rank's Python starts.
        _xla_collectives.choose(env, self.xla_collectives)
        env.update(self.extra_env)
        env.update(placement.rank_env(rank))
        env.update(JACCL_LOCAL_DEVICES=str(self.devices_per_process), JACCL_JOB_ID=job_id,
                   JACCL_PYTEST_JOB_DIR=str(job), JACCL_PYTEST_PARENT=str(os.getpid()),
                   PYTHONUNBUFFERED="1",
                   PYTHONPATH=os.pathsep.join([p for p in sys.path if p] + [env.get("PYTHONPATH", "")]))
        return env

    def runtest(self):
        limit = int(self.config.getini("jax_processes_max"))
        with hold_slots(self.processes, limit) as waited:
            self._run_job(f"; waited {waited:.1f} s for process slots (jax_processes_max = {limit})"
                          if waited >= 0.5 else "")

    def _run_job(self, slot_wait: str):
        job_id = secrets.token_hex(6)
        job = Path(tempfile.mkdtemp(prefix=f"jaccl-pytest-{job_id}-"))
        placement, procs, logs = None, [], []
        try:
            try:
                placement = Placement(self.processes, self.hosts, self.link_rate, job_id, self.network,
                                      self.rank_order)
            except NoNamespaces as e:
                pytest.skip(str(e))
            for rank in range(self.processes):
                (job / f"rank{rank}").mkdir()
                log = open(job / f"rank{rank}.log", "wb")
                logs.append(log)
                procs.append(subprocess.Popen(
                    placement.rank_prefix(rank) + self._rank_command(rank, job),
                    env=self._rank_env(rank, job, job_id, placement), cwd=self.config.invocation_params.dir,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            stopped = self._wait(procs, job)
            ranks = self._results(procs, stopped, job, job_id, placement, slot_wait)
            self._judge(ranks, placement)
        finally:
            _stop(procs, [p for p in procs if p.poll() is None])
            for log in logs:
                log.close()
            for path in glob.glob(f"/dev/shm/jaccl-{job_id}-*"):
                os.unlink(path)
            if placement is not None:
                placement.close()
            shutil.rmtree(job, ignore_errors=True)

    def _wait(self, procs, job: Path) -> set:
        """Waits for the ranks; returns the indices of those the job had to stop."""
        deadline = time.monotonic() + self.timeout
        failed_at = None
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
                failed_at = now
            if failed_at is None and (job / FAILED_FLAG).exists():
                failed_at = now
            if now > deadline or (failed_at is not None and now - failed_at > GRACE_S):
                running = {k for k, p in enumerate(procs) if p.poll() is None}
                _stop(procs, [procs[k] for k in running])
                return running
            time.sleep(0.05)
        return set()

    def _results(self, procs, stopped: set, job: Path, job_id: str, placement: Placement,
                 slot_wait: str) -> list:
        ranks = []
        for k, p in enumerate(procs):
            r = RankResult(rank=k, host=placement.host_of(k), pid=p.pid, stopped_by_job=k in stopped,
                           returncode=None if k in stopped else p.returncode)
            lines = _read(job / f"rank{k}.jsonl").splitlines()
            r.phases = [json.loads(line) for line in lines if line.strip()]
            r.log, r.stacks = _read(job / f"rank{k}.log"), _read(job / f"rank{k}.stacks")
            ranks.append(r)
            self.add_report_section("call", f"stdout [rank {k}]", r.log)
        self.add_report_section("call", "jax_processes job", f"{self.processes} processes x "
                                f"{self.devices_per_process} devices, {placement.description}; "
                                f"job {job_id}{slot_wait}")
        return ranks

    def _judge(self, ranks: list, placement: Placement) -> None:
        """Returns when every rank passed; otherwise skips or fails the test."""
        statuses = {r.status for r in ranks}
        if statuses == {"passed"}:
            self._warn_if_lax_ran_on_jaccl(ranks)
            return
        if statuses == {"skipped"}:
            reason = next(p["skip_reason"] for p in ranks[0].phases if p["outcome"] == "skipped")
            pytest.skip(reason or "skipped in every process")
        if "skipped" in statuses:
            skipped = [r.rank for r in ranks if r.status == "skipped"]
            first = next(r for r in ranks if r.status != "skipped")
            raise JobFailed(ranks, first, f"{placement.description}; only ranks {skipped} skipped: "
                            "a skip must be taken by every process")
        bad = [r for r in ranks if r.status != "passed"]
        first = min(bad, key=lambda r: (_blame(r), r.rank))
        raise self._as_expected_failure(JobFailed(ranks, first, placement.description))

    def _warn_if_lax_ran_on_jaccl(self, ranks: list) -> None:
        """A test of jaccl's ops against jax.lax whose jax.lax ran on jaccl's engine (the
        default for one CPU device per process) compares jaccl with itself: say so."""
        if self.xla_collectives != "jaccl" or not self.xla_collectives_by_default:
            return
        for r in ranks:
            carried = (r.phase("call") or {}).get("carriers") or {}
            if carried.get("jaccl_ops") and carried.get("xla_on_jaccl"):
                warnings.warn(LaxOnJacclWarning(
                    f"rank {r.rank} ran {carried['jaccl_ops']} of jaccl's ops and "
                    f"{carried['xla_on_jaccl']} of XLA's collectives (jax.lax, shardings) on "
                    "jaccl's engine: XLA's collectives run on jaccl by default in jobs of one CPU "
                    "device per process, so checking jaccl's ops against jax.lax here compares "
                    "jaccl with itself. Pass xla_collectives=\"gloo\" to the jax_processes mark to "
                    "check against JAX's own collectives, or xla_collectives=\"jaccl\" to say it is "
                    "meant; jax_job.xla_collectives tells the test which carries jax.lax."))
                return

    def _as_expected_failure(self, failure: JobFailed) -> JobFailed:
        """Under xfail(raises=E): where some rank's exception is an E, the job's failure is
        also an E (so pytest counts it as the expected failure); else it stays as it is."""
        mark = self.get_closest_marker("xfail")
        raises = mark.kwargs.get("raises") if mark is not None else None
        expected = [c for c in (raises if isinstance(raises, tuple) else (raises,)) if isinstance(c, type)]
        raised = {name for r in failure.ranks for p in r.phases for name in p.get("exception", [])}
        for cls in expected:
            if class_name(cls) not in raised:
                continue
            try:
                both = type(f"JobFailedWith{cls.__name__}", (JobFailed, cls), {})
                return both(failure.ranks, failure.first, failure.placement)
            except Exception:  # a class that cannot be a second base (layout, __init__)
                return failure
        return failure

    def repr_failure(self, excinfo):
        if not isinstance(excinfo.value, JobFailed):
            return super().repr_failure(excinfo)
        failure = excinfo.value
        lines = [str(failure), f"job: {len(failure.ranks)} processes, {failure.placement}", ""]
        lines += [f"  rank {r.rank} (host {r.host}, pid {r.pid}): {r.status}" for r in failure.ranks]
        for r in failure.ranks:
            if r.status == "passed":
                continue
            lines += ["", f"--- rank {r.rank} (host {r.host}, pid {r.pid}) ---", r.explanation()]
            if r.stacks.strip():
                lines += ["", f"--- rank {r.rank}: Python stacks when the job stopped it ---", r.stacks.rstrip()]
        return "\n".join(lines)


def _blame(r: RankResult) -> int:
    """Causes before consequences: a failed test, a crash, a hang in the test, then ranks that
    passed but were stopped at exit (waiting for the others)."""
    if r.status == "failed":
        return 0
    if not r.stopped_by_job:
        return 1
    return 2 if r.phase("call") is None else 3


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _stop(procs, running) -> None:
    """faulthandler's stacks (SIGUSR1), then SIGKILL of each rank's whole process group."""
    for p in running:
        _signal_group(p, signal.SIGUSR1, group=False)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and any(p.poll() is None for p in running):
        time.sleep(0.05)
    for p in procs:
        _signal_group(p, signal.SIGKILL)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _signal_group(p, sig, group: bool = True) -> None:
    try:
        if group:
            os.killpg(p.pid, sig)
        elif p.poll() is None:
            os.kill(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
