"""The rank side of a `jax_processes` job: one process of the job, a pytest session of its own
that collects the one test again and runs it.

Contract: active only where JACCL_PYTEST_JOB_DIR is set (the job's parent sets it, with the
JACCL_* variables jaccl-run sets). start() runs from the earliest pytest hook, before any
conftest or test module is imported: the rank dies with its parent (PR_SET_PDEATHSIG), dumps
every thread's Python stack to <job>/rank<k>.stacks on SIGUSR1, and calls
jax_jaccl.distributed.initialize(). record() appends each phase's report to <job>/rank<k>.jsonl
as one JSON line (written and flushed at once, so a rank killed later still leaves what it
finished), with the classes of a failed phase's exception (most derived first, as
"module.QualName"; note_exception() attaches them) and, for the test's call, what carried its
collectives (carriers()); a failed one also creates <job>/failed (the parent's signal to stop
waiting for the others). JaxJob is what the `jax_job` fixture gives a test.
"""

from __future__ import annotations

import ctypes
import faulthandler
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import _settings, _xla_collectives

JOB_DIR = "JACCL_PYTEST_JOB_DIR"
FAILED_FLAG = "failed"
EXCEPTION = "jaccl_exception_classes"


def active() -> bool:
    return bool(os.environ.get(JOB_DIR))


def rank() -> int:
    return _settings.launch().process_id


def job_dir() -> Path:
    return Path(os.environ[JOB_DIR])


_stacks_file = None


def start() -> None:
    global _stacks_file
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != int(os.environ.get("JACCL_PYTEST_PARENT", os.getppid())):
        os._exit(70)  # the parent died before the line above took effect
    _stacks_file = open(job_dir() / f"rank{rank()}.stacks", "w")
    faulthandler.register(signal.SIGUSR1, file=_stacks_file, all_threads=True)
    from .. import distributed

    distributed.initialize()


def carriers() -> dict:
    """What carried this process's collectives so far: jaccl's own ops (calls of its FFI
    handlers) and XLA's collectives (jax.lax, shardings) run on jaccl's mpiabi library."""
    ext = sys.modules.get("jax_jaccl._ext")
    own = sum(ext.engine.call_counts()) if ext is not None and ext.engine.is_initialized() else 0
    return {"jaccl_ops": int(own), "xla_on_jaccl": _xla_collectives.served()}


def record(config, report) -> None:
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    line = json.dumps({"when": getattr(report, "when", "collect"), "outcome": report.outcome,
                       "text": report.longreprtext if report.failed or report.skipped else "",
                       "skip_reason": _skip_reason(report), "exception": getattr(report, EXCEPTION, []),
                       "carriers": carriers() if getattr(report, "when", "") == "call" else {},
                       "report": data}, default=str)
    with open(job_dir() / f"rank{rank()}.jsonl", "a") as f:
        f.write(line + "\n")
        f.flush()
    if report.failed:
        (job_dir() / FAILED_FLAG).touch()


def note_exception(report, exc: BaseException) -> None:
    setattr(report, EXCEPTION, [class_name(c) for c in type(exc).__mro__])


def class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _skip_reason(report) -> str:
    if report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return ""


@dataclass(frozen=True)
class JaxJob:
    """The job a test runs in, as seen from one of its processes."""

    process_index: int
    process_count: int
    host_index: int
    host_count: int
    local_device_count: int
    job_id: str
    shared_path: Path  # one folder for every process of the job
    xla_collectives: str  # what carries jax.lax's collectives here: "jaccl" (its engine) or "gloo"

    @classmethod
    def here(cls) -> "JaxJob":
        import jax

        shared = job_dir() / "shared"
        shared.mkdir(exist_ok=True)
        return cls(process_index=jax.process_index(), process_count=jax.process_count(),
                   host_index=int(os.environ["JACCL_TEST_HOST_INDEX"]),
                   host_count=int(os.environ["JACCL_TEST_HOSTS"]),
                   local_device_count=jax.local_device_count(), job_id=_settings.read().job_id,
                   shared_path=shared,
                   xla_collectives="jaccl" if _xla_collectives.active() else "gloo")
