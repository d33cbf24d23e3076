"""Every JACCL_* setting in one table: its variable, default, meaning, and whether the
processes of a job must agree on it.

Contract:
- current() reads the environment once per process, at its first call (the first lowering of a
  jaccl op, jaccl.init(), a trace under JACCL_STRICT_ORDER), and returns the same frozen
  Settings ever after. A value that does not parse raises ValueError naming the variable and
  what it accepts. read(env) parses any mapping (tests, jaccl-info).
- Settings.agreed() holds the settings every process of a job must share; the bootstrap
  compares them across processes and stops every process naming the first difference.
- The C++ engines never read the environment: the bootstrap hands them their part
  (engine_part(), cuda_part()) before the world starts.
- launch() reads the variables jaccl-run sets for jax_jaccl.distributed.initialize(); they
  describe the job rather than tune it, and are read when initialize() runs.
- override(**fields) replaces fields for a with-block (tests) and hands the engines the result.
- unknown(env) lists the JACCL_* variables that are neither settings, nor the build's
  (JACCL_CUDA, JACCL_OFI), nor the test harness's own (JACCL_TEST_*, JACCL_PYTEST_*, JACCL_EMULATED_GPUS,
  JACCL_REQUIRE_OFI): the bootstrap warns about each, since a misspelt setting would otherwise
  be ignored without a word.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from typing import Any, Callable, Mapping


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError("must be a positive number")
    return value


def _at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise ValueError(f"must be an integer >= {low}")
        return value
    return parse


def _between(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise ValueError(f"must be an integer from {low} to {high}")
        return value
    return parse


def _frame_bytes(text: str) -> int:
    kib = float(text)
    if kib < 4:
        raise ValueError("must be at least 4 (KiB)")
    return int(kib * 1024) // 64 * 64


def _optional_count(text: str) -> int | None:
    return _at_least(0)(text) if text else None


def _flag(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("", "0", "false", "no", "off"):
        return False
    if lowered in ("1", "true", "yes", "on"):
        return True
    raise ValueError("must be 0 or 1")


def _one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower() or choices[0]
        if value not in choices:
            raise ValueError("must be " + ", ".join(choices[:-1]) + " or " + choices[-1])
        return value
    return parse


def _text(text: str) -> str:
    return text.strip()


@dataclasses.dataclass(frozen=True)
class Variable:
    field: str
    env: str
    default: str
    parse: Callable[[str], Any]
    agree: bool  # every process of a job must have the same value
    meaning: str


VARIABLES = (
    Variable("timeout_s", "JACCL_TIMEOUT", "120", _positive_float, False,
             "seconds any wait may last before it fails"),
    Variable("debug", "JACCL_DEBUG", "warn", _one_of("warn", "none", "info", "trace"), False,
             "INFO: transport and algorithm once per communicator, op and size class"),
    Variable("algorithm", "JACCL_ALGO", "", _text, True,
             "force an algorithm: `ring`, or per op `all_reduce=ring,reduce_scatter=mesh`"),
    Variable("frame_bytes", "JACCL_FRAME_KB", "512", _frame_bytes, True,
             "payload of one transport frame in KiB"),
    Variable("slots", "JACCL_SLOTS", "4", _at_least(2), True, "frames in flight per channel"),
    Variable("spin_us", "JACCL_SPIN_US", "", _optional_count, False,
             "busy-wait before sleeping on a doorbell (default 50, 0 when ranks outnumber cores)"),
    Variable("strict_order", "JACCL_STRICT_ORDER", "0", _flag, True,
             "1: order collectives with a JAX ordered effect"),
    Variable("call_sites", "JACCL_CALL_SITES", "1", _flag, True,
             "0: ranks pair collectives by their order only, not also by the line that wrote "
             "them (for ranks that write one collective on different lines)"),
    Variable("lanes", "JACCL_LANES", "4", _between(1, 8), True,
             "CPU: lanes per device: calls of different chains (blocks) of a program run at "
             "once, each lane with its own threads and streams; 1: one call of a device at a "
             "time, over unshared channels"),
    Variable("evict_stalled", "JACCL_EVICT_STALLED", "0", _flag, False,
             "1: a call that times out kills (SIGKILL) the processes of its host that never "
             "reached it, and those on other hosts it waits for kill themselves if they never "
             "reached it: a stalled process is lost like a dead one (jaccl-run --keep-going "
             "sets it)"),
    Variable("host_id", "JACCL_HOST_ID", "", _text, False,
             "processes with the same id share memory (default: machine + network namespace)"),
    Variable("job_id", "JACCL_JOB_ID", "", _text, False,
             "names the job's shared-memory segments (jaccl-run sets it; process 0's is used)"),
    Variable("ifname", "JACCL_IFNAME", "", _text, False,
             "network interface for TCP between hosts (default: the one reaching the coordinator)"),
    Variable("tcp_sockets", "JACCL_TCP_SOCKETS", "2", _at_least(1), True,
             "data sockets per TCP link (each link has a control socket besides)"),
    Variable("transport", "JACCL_TRANSPORT", "auto", _one_of("auto", "tcp", "ofi"), False,
             "between hosts: auto (libfabric for an RDMA NIC, else TCP), tcp, ofi "
             "(the bootstrap checks that the processes' choices agree)"),
    Variable("ofi_provider", "JACCL_OFI_PROVIDER", "", _text, False,
             "libfabric provider, e.g. `verbs;ofi_rxm`, `efa`, `cxi`, `tcp;ofi_rxm`"),
    Variable("ofi_mode", "JACCL_OFI_MODE", "auto", _one_of("auto", "write", "message"), False,
             "libfabric: write (RMA with CQ data), message (tagged), auto (write where it works)"),
    Variable("moe_schedule", "JACCL_MOE_SCHEDULE", "remote_first",
             _one_of("remote_first", "arrival"), False,
             "MoE combine: reduce local rows while the network drains, or in rank order at the end"),
    Variable("async_calls", "JACCL_ASYNC", "1", _flag, False,
             "CPU: collectives of at least JACCL_ASYNC_MIN_KB return to XLA at once and run on "
             "the device's own thread while XLA computes what does not depend on them; 0: "
             "every call blocks XLA's thread"),
    Variable("async_min_kb", "JACCL_ASYNC_MIN_KB", "1024", _at_least(0), False,
             "CPU: smallest asynchronous call, KiB (smaller ones cost more in thread hops than "
             "they hide within a host; between slow hosts a smaller value may hide more)"),
    Variable("single_copy_min_kb", "JACCL_SINGLE_COPY_MIN_KB", "256", _at_least(0), False,
             "CPU: smallest block of an all_gather or all_to_all that a device reads straight "
             "out of the sender's memory when both are on one host (another process's with "
             "Linux's process_vm_readv, where the kernel allows it): one copy instead of two "
             "through shared-memory frames; 0: never"),
    Variable("huge_pages", "JACCL_HUGE_PAGES", "1", _flag, False,
             "jaccl-run: starts its processes with glibc's malloc asking for transparent huge "
             "pages on the memory it maps (GLIBC_TUNABLES=glibc.malloc.hugetlb=1, beside any "
             "tunables set), so XLA's fresh buffers fault in 2 MiB at a time, not 4 KiB; 0: "
             "the environment as it is"),
    Variable("keep_freed_memory", "JACCL_KEEP_FREED_MEMORY", "1", _flag, False,
             "jaccl-run: starts its processes with glibc's malloc keeping what a program frees "
             "for its next allocations (GLIBC_TUNABLES glibc.malloc.mmap_max=0, arena_max=1, "
             "trim_threshold=4 GiB, each unless the tunables set it), so XLA's fresh buffers of "
             "each call reuse pages already faulted in; a process's resident memory then stays "
             "near its peak; 0: malloc as it is"),
    Variable("cuda_path", "JACCL_CUDA_PATH", "auto", _one_of("auto", "peer", "staged"), True,
             "GPUs: peer (fail where the peer path cannot be used), staged, or auto"),
    Variable("cuda_buffer_mb", "JACCL_CUDA_BUFFER_MB", "64", _at_least(1), True,
             "GPUs: staging area per device for the peer path, MiB"),
    Variable("cuda_one_shot_kb", "JACCL_CUDA_ONESHOT_KB", "256", _at_least(0), True,
             "GPUs: largest one-shot all_reduce on the peer path, KiB"),
)

# Knobs of jaccl's own benchmarks and emulated hosts, not for tuning a job: read like the
# settings above (Settings has their fields; the engine takes moe_local_delay_us), listed
# apart in docs/settings.md.
BENCH_VARIABLES = (
    Variable("moe_local_delay_us", "JACCL_MOE_LOCAL_DELAY_US", "0", _at_least(0), False,
             "MoE combine: a pause per token of local work (a slower host)"),
    Variable("tbf_burst", "JACCL_TBF_BURST", "256kb", _text, False,
             "emulated hosts: burst of a rate-limited link (tc tbf)"),
    Variable("tbf_latency", "JACCL_TBF_LATENCY", "200ms", _text, False,
             "emulated hosts: queueing latency of a rate-limited link (tc tbf)"),
)

LAUNCH_VARIABLES = (
    Variable("coordinator", "JACCL_COORDINATOR", "", _text, False,
             "address of JAX's coordinator (jaccl-run sets it)"),
    Variable("num_processes", "JACCL_NUM_PROCESSES", "0", _at_least(0), False,
             "processes in the job (jaccl-run sets it)"),
    Variable("process_id", "JACCL_PROCESS_ID", "0", _at_least(0), False,
             "this process's index (jaccl-run sets it)"),
    Variable("local_devices", "JACCL_LOCAL_DEVICES", "0", _at_least(0), False,
             "CPU devices of this process (jaccl-run's --devices-per-process)"),
    Variable("restart", "JACCL_RESTART", "0", _at_least(0), False,
             "how many times jaccl-run started this process before (its --restarts)"),
    Variable("init_timeout_s", "JACCL_INIT_TIMEOUT", "120", _positive_float, False,
             "seconds jax.distributed.initialize() waits for every process"),
    Variable("heartbeat_timeout_s", "JACCL_HEARTBEAT_TIMEOUT", "100", _positive_float, False,
             "seconds without a heartbeat before JAX declares a process dead"),
    Variable("shutdown_timeout_s", "JACCL_SHUTDOWN_TIMEOUT", "30", _positive_float, False,
             "seconds JAX's shutdown barrier waits"),
    Variable("xla_collectives", "JACCL_XLA_COLLECTIVES", "gloo", _one_of("gloo", "jaccl"), True,
             "what carries the collectives XLA emits itself: jaccl's engine or JAX's gloo "
             "(jaccl-run's --xla-collectives; compared as what the process runs on)"),
    Variable("coordination_service", "JACCL_COORDINATION_SERVICE", "auto",
             _one_of("auto", "process0", "launcher"), False,
             "where JAX's coordination service runs: `launcher`: jaccl-run's (jaccl-run "
             "--keep-going sets it: the job survives a lost process 0), else in process 0 "
             "(JAX's way; `process0` in jaccl-run's own environment keeps it there)"),
)


def _parse(variables, env: Mapping[str, str]) -> dict:
    values = {}
    for v in variables:
        text = env.get(v.env, "")
        try:
            values[v.field] = v.parse(text if text.strip() else v.default)
        except ValueError as e:
            reason = str(e) if str(e).startswith("must") else "must be a number"
            raise ValueError(f"jaccl: {v.env} {reason}, not {text!r} ({v.meaning})") from None
    return values


@dataclasses.dataclass(frozen=True)
class Settings:
    timeout_s: float
    debug: str
    algorithm: str
    frame_bytes: int
    slots: int
    spin_us: int | None
    strict_order: bool
    call_sites: bool
    lanes: int
    evict_stalled: bool
    host_id: str
    job_id: str
    ifname: str
    tcp_sockets: int
    transport: str
    ofi_provider: str
    ofi_mode: str
    moe_schedule: str
    async_calls: bool
    async_min_kb: int
    single_copy_min_kb: int
    huge_pages: bool
    keep_freed_memory: bool
    cuda_path: str
    cuda_buffer_mb: int
    cuda_one_shot_kb: int
    moe_local_delay_us: int  # BENCH_VARIABLES from here
    tbf_burst: str
    tbf_latency: str

    def agreed(self) -> dict:
        """{variable: value} of the settings every process must share."""
        return {v.env: getattr(self, v.field) for v in VARIABLES if v.agree}

    def engine_part(self) -> dict:
        """The keyword arguments of the CPU engine's configure()."""
        return dict(algorithm=self.algorithm, debug=self.debug, moe_schedule=self.moe_schedule,
                    moe_local_delay_us=self.moe_local_delay_us,
                    async_min_bytes=self.async_min_kb * 1024 if self.async_calls else -1,
                    single_copy_min_bytes=self.single_copy_min_kb * 1024)

    def cuda_part(self) -> dict:
        """The keyword arguments of the CUDA engine's configure()."""
        return dict(path=self.cuda_path, one_shot_bytes=self.cuda_one_shot_kb * 1024,
                    debug=self.debug)


@dataclasses.dataclass(frozen=True)
class Launch:
    coordinator: str
    num_processes: int
    process_id: int
    local_devices: int
    restart: int
    init_timeout_s: float
    heartbeat_timeout_s: float
    shutdown_timeout_s: float
    xla_collectives: str
    coordination_service: str
    ifname: str


def read(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    return Settings(**_parse(VARIABLES + BENCH_VARIABLES, env))


def launch(env: Mapping[str, str] | None = None) -> Launch:
    env = os.environ if env is None else env
    values = _parse(LAUNCH_VARIABLES, env)
    ifname = next(v for v in VARIABLES if v.field == "ifname")
    return Launch(**values, **_parse([ifname], env))


_HARNESS_PREFIXES = ("JACCL_TEST_", "JACCL_PYTEST_")
_HARNESS_NAMES = ("JACCL_CUDA", "JACCL_OFI", "JACCL_EMULATED_GPUS", "JACCL_REQUIRE_OFI")


def unknown(env: Mapping[str, str] | None = None) -> list[str]:
    env = os.environ if env is None else env
    known = {v.env for v in VARIABLES + BENCH_VARIABLES + LAUNCH_VARIABLES}
    known |= set(_HARNESS_NAMES)
    return sorted(k for k in env if k.startswith("JACCL_") and k not in known
                  and not k.startswith(_HARNESS_PREFIXES))


_lock = threading.Lock()
_current: Settings | None = None


def current() -> Settings:
    global _current
    with _lock:
        if _current is None:
            _current = read()
        return _current


def hand_to_engines(settings: Settings) -> None:
    """Gives the C++ engines their part of `settings` (each keeps its own copy)."""
    from ._ext import cuda_engine, engine

    engine.configure(**settings.engine_part())
    if cuda_engine is not None:
        cuda_engine.configure(**settings.cuda_part())


@contextlib.contextmanager
def override(**fields):
    """Runs a with-block under current() with `fields` replaced (tests of one setting)."""
    global _current
    before = current()
    changed = dataclasses.replace(before, **fields)
    with _lock:
        _current = changed
    hand_to_engines(changed)
    try:
        yield changed
    finally:
        with _lock:
            _current = before
        hand_to_engines(before)


def markdown_table(variables=VARIABLES + LAUNCH_VARIABLES) -> str:
    """A table of docs/settings.md: the settings and launch variables (the default), or the
    benchmarks' knobs (BENCH_VARIABLES)."""
    rows = ["| variable | default | must agree | meaning |", "|---|---|---|---|"]
    for v in variables:
        rows.append(f"| `{v.env}` | {v.default or ' '} | {'yes' if v.agree else ''} | "
                    f"{v.meaning} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
    print("\nBenchmarks and emulated hosts:\n")
    print(markdown_table(BENCH_VARIABLES))
