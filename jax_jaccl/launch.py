"""jaccl-run: start a multi-process JAX job on this machine or on several hosts.

    jaccl-run -n N [--devices-per-process L] [--grace S | --keep-going [--restarts R]]
              [--xla-collectives jaccl|gloo] [--] python script.py args...
    jaccl-run --hostfile hosts.json [--devices-per-process L] [--keep-going] [--] python ...

Starts the processes, each with JACCL_COORDINATOR, JACCL_NUM_PROCESSES, JACCL_PROCESS_ID,
JACCL_LOCAL_DEVICES and JACCL_JOB_ID set for jax_jaccl.distributed.initialize(), which a
script may also leave out: jax.distributed.initialize() with no arguments finds them
(jax_jaccl/_cluster.py), and JAX_NUM_CPU_DEVICES gives it the devices. Each line of
output is prefixed with "[rank] ". When a process fails, jaccl-run names it, its error and
when; the others get `--grace` seconds to report their own errors and are then killed, and
jaccl-run exits with the first failure's code (0 if all succeed). With `--keep-going` the
others run on (a job that goes on without a lost process): jaccl-run exits 0 when at least one
process finished with 0, and ends with a line naming every process lost, how and when; a
process that stalls (one that never reaches a collective the others wait in, JACCL_TIMEOUT) is
evicted (killed) and lost the same way (JACCL_EVICT_STALLED=1, which --keep-going sets).
With `--keep-going`, jaccl-run runs JAX's coordination service itself, recoverable (here, or
in a helper on the first host where hosts are reached by ssh or a prefix: _service.py;
JACCL_COORDINATION_SERVICE=launcher, so process 0 starts none: _cluster.py), so that losing
process 0 does not end the job as it does where process 0 runs it (JACCL_COORDINATION_SERVICE=
process0 in jaccl-run's environment keeps it there); and it tells the service at once when a
process that had connected to it dies, so that the others need not wait for JAX's heartbeat
timeout (_report_lost).
`--restarts R` (with `--keep-going`) starts a lost process again, R times in all over the job,
while the coordination service runs (process 0 only where jaccl-run runs it), with its rank,
its environment and JACCL_RESTART=<how many times it was started before>: under JAX's
recoverability it rejoins the others (jaccl builds a world that includes it when a program is
lowered over a mesh of its devices too; docs/multi-process-and-hosts.md).

The collectives XLA emits itself (jit with shardings, jax.lax in shard_map) run on jaccl's
engine too (docs/xla-collectives.md), by default whenever the job has several processes of
one CPU device each, and with several devices per process when
`--xla-collectives jaccl` asks; `--xla-collectives gloo` keeps JAX's own. On exit it kills
whatever is left and removes the job's shared-memory names from /dev/shm; killed outright
(SIGKILL), it takes its processes with it (each dies with its launcher: PR_SET_PDEATHSIG).

A hostfile lists the hosts in rank order:
    {"hosts": [{"ssh": "user@node0", "processes": 2, "ifname": "eth0"},
               {"prefix": ["ip", "netns", "exec", "h1"], "address": "10.0.0.2", "processes": 2}]}
A host is reached with `ssh` (its environment passed with `env`), or started locally behind a
command `prefix`, or plainly when it has neither. `address` is where the other hosts reach it
(default: the ssh host name, else 127.0.0.1); the first host's is the coordinator's.
`ifname` sets JACCL_IFNAME for that host's processes, `env` more variables (through ssh too); `coordinator_host`, how that host reaches
the coordinator if not at the first host's `address` (a separate control network). Under SLURM or Open MPI no hostfile is
needed: start the script with srun / mpirun and call jax_jaccl.distributed.initialize().
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

from . import _cluster, _service, _settings, _xla_collectives


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse(argv):
    parser = argparse.ArgumentParser(prog="jaccl-run", description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--nprocs", type=int, default=None, help="processes to start")
    parser.add_argument("--hostfile", default=None, help="JSON list of hosts (see above)")
    parser.add_argument("--devices-per-process", type=int, default=1,
                        help="CPU devices per process (jax_num_cpu_devices)")
    parser.add_argument("--grace", type=float, default=None,
                        help="seconds the others may run after one fails (default: JACCL_TIMEOUT + 5)")
    parser.add_argument("--keep-going", action="store_true",
                        help="when a process fails, let the others run on; exit 0 when at least "
                             "one finished with 0 (also sets JACCL_EVICT_STALLED=1: a process "
                             "that stalls is killed and lost the same way)")
    parser.add_argument("--restarts", type=int, default=0,
                        help="with --keep-going: start a lost process again, this many times in "
                             "all over the job (default 0)")
    parser.add_argument("--xla-collectives", choices=("gloo", "jaccl"), default=None,
                        help="what carries the collectives XLA emits itself (default: jaccl with "
                             "one CPU device per process, else gloo)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="command to run (after --)")
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command given")
    if args.hostfile:
        with open(args.hostfile) as f:
            args.hosts = json.load(f)["hosts"]
        total = sum(int(h.get("processes", 1)) for h in args.hosts)
        if args.nprocs not in (None, total):
            parser.error(f"-n {args.nprocs} disagrees with the hostfile's {total} processes")
        args.nprocs = total
    else:
        if args.nprocs is None:
            parser.error("give -n or --hostfile")
        args.hosts = [{"processes": args.nprocs}]
    if args.nprocs < 1 or args.devices_per_process < 1:
        parser.error("-n and --devices-per-process must be positive")
    try:
        args.xla_collectives = _xla_collectives.resolve(args.xla_collectives, args.nprocs,
                                                        args.devices_per_process)
    except ValueError as e:
        parser.error(f"--xla-collectives: {e}")
    if args.keep_going and args.grace is not None:
        parser.error("--grace and --keep-going exclude each other (--keep-going stops no one)")
    if args.restarts and not args.keep_going:
        parser.error("--restarts needs --keep-going (the others run on while a process restarts)")
    if args.restarts < 0:
        parser.error("--restarts must be 0 or more")
    if args.grace is None:
        args.grace = _settings.read().timeout_s + 5
    return args


# The last line of a Python traceback: "KIND: message" or "KIND" (jax.errors.JaxRuntimeError...)
_ERROR_LINE = re.compile(rb"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b(: .*)?$")


def _pump(rank: int, stream, out, lock, errors=None, connected=None) -> None:
    """Copies one of a process's streams to `out` a whole line at a time, each prefixed with
    "[rank] ". A process's stdout and stderr are pumped separately: Python writes print()'s
    text and its newline in two calls when unbuffered, so on one shared pipe a log line from
    the extension (stderr) could land between them and both lines would be garbled. With
    `errors` (stderr's pump), the last line that ends a Python traceback is kept there; with
    `connected`, a process's note that it connected to jaccl-run's coordination service
    (_cluster.CONNECTED) adds (rank, restart) there instead of being copied."""
    for line in iter(stream.readline, b""):
        if connected is not None and line.startswith(_cluster.CONNECTED):
            connected.add((rank, int(line[len(_cluster.CONNECTED):])))
            continue
        if not line.endswith(b"\n"):
            line += b"\n"
        if errors is not None and _ERROR_LINE.match(line.rstrip()):
            errors[rank] = line.rstrip().decode(errors="replace")
        with lock:
            out.write(f"[{rank}] ".encode() + line)
            out.flush()
    stream.close()


def _kill(procs, sig) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass


def signal_name(number: int) -> str:
    """"SIGKILL" for 9; "signal N" for a number Python does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _how(rc: int) -> str:
    """A process's exit status in words: "exited with 3", "was killed by SIGKILL"."""
    return f"was killed by {signal_name(-rc)}" if rc < 0 else f"exited with {rc}"


def _address(host: dict) -> str:
    if "address" in host:
        return host["address"]
    if "ssh" in host:
        return host["ssh"].rsplit("@", 1)[-1]
    return "127.0.0.1"


_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def _die_with_launcher() -> None:
    """In a started process, before its command runs: SIGKILL when jaccl-run ends."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _command(host: dict, env: dict, command: list) -> tuple[list, dict]:
    """The command line and local environment that start one process on `host`."""
    if "ssh" in host:  # the job's variables, and every one the hostfile gives this host
        job_env = [f"{k}={shlex.quote(v)}" for k, v in env.items()
                   if k.startswith("JACCL_") or k in _xla_collectives.VARIABLES or
                   k in ("JAX_NUM_CPU_DEVICES", "GLIBC_TUNABLES") or k in host.get("env", {})]
        remote = " ".join(["env", *job_env, "PYTHONUNBUFFERED=1", *map(shlex.quote, command)])
        return ["ssh", "-o", "BatchMode=yes", host["ssh"], remote], dict(os.environ)
    return list(host.get("prefix", [])) + list(command), env


# The glibc tunables behind JACCL_HUGE_PAGES and JACCL_KEEP_FREED_MEMORY.
_HUGE_PAGES = (("glibc.malloc.hugetlb", "1"),)
_KEEP_FREED = (("glibc.malloc.mmap_max", "0"), ("glibc.malloc.arena_max", "1"),
               ("glibc.malloc.trim_threshold", str(4 << 30)))


def with_malloc_tunables(env: dict, settings) -> None:
    """Adds to env's GLIBC_TUNABLES, after those set, each tunable of the settings that are on
    whose name they do not set (docs/performance.md, "Fresh buffers"). XLA:CPU gives every
    output and temporary a buffer from glibc's malloc. JACCL_HUGE_PAGES: malloc asks for
    transparent huge pages (madvise) on the memory it maps, so a buffer of many MiB faults in
    2 MiB pages instead of 4 KiB ones. JACCL_KEEP_FREED_MEMORY: malloc serves every size from
    one heap (no fresh mapping per large buffer, one arena for all threads: a thread's own
    arena maps anew what exceeds its 64 MiB heaps) and gives back only a free top above 4 GiB,
    so the next call's buffers lie in pages already faulted in. glibc ignores tunables it does
    not know (hugetlb before 2.35). jaccl-bench gives its mpirun jobs the same."""
    wanted = (_HUGE_PAGES if settings.huge_pages else ()) + \
        (_KEEP_FREED if settings.keep_freed_memory else ())
    tunables = env.get("GLIBC_TUNABLES", "")
    named = {item.split("=", 1)[0] for item in tunables.split(":") if item}
    added = [f"{name}={value}" for name, value in wanted if name not in named]
    if added:
        env["GLIBC_TUNABLES"] = ":".join(filter(None, (tunables, *added)))


def _first_host_command(args):
    """How jaccl-run starts a command on the first host (tail: the interpreter's arguments):
    None where every host is this machine, started plainly."""
    host = args.hosts[0]
    if not any(h.get("ssh") or h.get("prefix") for h in args.hosts):
        return None
    job_python = os.path.basename(args.command[0]).startswith("python")
    python = args.command[0] if job_python else sys.executable if "ssh" not in host else "python3"
    return lambda tail: _command(host, dict(os.environ), [python, *tail])


def _report_lost(service, rank: int, out, lock, topology_again: bool) -> bool:
    """Tells jaccl-run's coordination service that process `rank`, which had connected to it,
    died: the others' multihost_utils.live_devices answers without it now, not at its
    heartbeat timeout (JACCL_HEARTBEAT_TIMEOUT), so a job goes on at once and the timeout can be
    long enough that a stalled machine does not make JAX count live processes dead
    (`topology_again`: process 0 is to start again, see _compat.report_lost). Where the service
    cannot be told, says so (the others learn it at the timeout) and returns False."""
    try:
        service.report_lost(rank, topology_again)
        return True
    except Exception as e:  # noqa: BLE001 - the job goes on; JAX's heartbeat still tells them
        with lock:
            out.write(f"jaccl-run: JAX's coordination service could not be told that process "
                      f"{rank} is gone ({e}); the others learn it at its heartbeat "
                      "timeout\n".encode())
            out.flush()
        return False


def run(args) -> int:
    port = free_port()
    settings = _settings.read()
    job = settings.job_id or secrets.token_hex(6)
    default_coordinator = _address(args.hosts[0])
    try:
        service = _service.start(_first_host_command(args), port, args.nprocs) \
            if args.keep_going else None
    except RuntimeError as e:  # the helper on the first host: what it printed is above
        print(e, file=sys.stderr)
        return 1
    out = sys.stdout.buffer
    lock = threading.Lock()
    procs, pumps = [], []  # pumps: each start's two (stdout, stderr), in start order
    errors = {}  # rank -> the last error its stderr showed
    connected = set()  # (rank, restart) of each start that connected to the service (_pump)
    placement = [host for host in args.hosts for _ in range(int(host.get("processes", 1)))]

    def start(rank: int, restart: int = 0) -> subprocess.Popen:
        host = placement[rank]
        env = dict(os.environ,
                   JACCL_COORDINATOR=f"{host.get('coordinator_host', default_coordinator)}:{port}",
                   JACCL_NUM_PROCESSES=str(args.nprocs),
                   JACCL_PROCESS_ID=str(rank),
                   JACCL_LOCAL_DEVICES=str(args.devices_per_process),
                   JAX_NUM_CPU_DEVICES=str(args.devices_per_process),  # for jax alone
                   JACCL_JOB_ID=job,
                   JACCL_RESTART=str(restart),
                   PYTHONUNBUFFERED="1")
        _xla_collectives.choose(env, args.xla_collectives)
        if service is not None:
            env["JACCL_COORDINATION_SERVICE"] = "launcher"  # process 0 connects to it too
        if args.keep_going:  # a stalled process becomes a lost one the others go on without
            env.setdefault("JACCL_EVICT_STALLED", "1")
        if "ifname" in host:
            env["JACCL_IFNAME"] = host["ifname"]
        env.update({k: str(v) for k, v in host.get("env", {}).items()})
        with_malloc_tunables(env, settings)
        cmd, cmd_env = _command(host, env, args.command)
        # Every process dies with jaccl-run, also when jaccl-run is killed outright (a test's
        # timeout): nothing of the job outlives its launcher.
        return subprocess.Popen(cmd, env=cmd_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, preexec_fn=_die_with_launcher)

    def pump(rank: int, p: subprocess.Popen) -> None:
        for stream, kept, notes in ((p.stdout, None, None), (p.stderr, errors, connected)):
            t = threading.Thread(target=_pump, args=(rank, stream, out, lock, kept, notes),
                                 daemon=True)
            t.start()
            pumps.append(t)

    try:
        # The output pumps start once every process is: no other thread runs while the job's
        # processes fork (a restart, later, forks beside them).
        procs.extend(start(rank) for rank in range(len(placement)))
        for rank, p in enumerate(procs):
            pump(rank, p)
        stderr_pump = {rank: pumps[2 * rank + 1] for rank in range(len(procs))}
        failed_at, lost = None, {}  # lost: (rank, its restarts) -> (its words, its status), once named
        started, restarts = time.monotonic(), [0] * len(procs)

        def name_the_failed(may_restart=True):
            """Names each process that failed since the last look: the first always, the
            others with --keep-going (else they are the job being stopped); starts it again
            while --restarts allows and JAX's coordination service (which a process started
            again registers with) runs, jaccl-run's or in process 0; process 0 itself only
            where the service is jaccl-run's and was told of its loss (its device topology,
            which XLA's CPU client publishes once, removed with it: _compat.report_lost)."""
            nonlocal failed_at
            for rank, p in enumerate(procs):
                rc = p.poll()
                stopping = failed_at is not None and not args.keep_going
                if rc in (None, 0) or (rank, restarts[rank]) in lost or stopping:
                    continue
                failed_at = failed_at or time.monotonic()
                budget = may_restart and sum(restarts) < args.restarts
                again = budget and (service is not None or procs[0].poll() is None)
                if (rank, restarts[rank]) not in connected:
                    stderr_pump[rank].join(timeout=1)  # a note of connecting not yet read?
                reported = service is not None and (rank, restarts[rank]) in connected and \
                    _report_lost(service, rank, out, lock, topology_again=again and rank == 0)
                again = again and (rank != 0 or reported)
                stderr_pump[rank].join(timeout=1)  # its last words, before we name them
                why = f" ({errors.pop(rank)})" if rank in errors else ""
                words = f"process {rank} {_how(rc)}{why} at {time.monotonic() - started:.1f} s"
                lost[(rank, restarts[rank])] = words, rc
                if again:
                    then = "starting it again (--restarts)"
                    restarts[rank] += 1
                    procs[rank] = start(rank, restarts[rank])
                    pump(rank, procs[rank])
                    stderr_pump[rank] = pumps[-1]
                elif args.keep_going and rank == 0 and service is None:
                    then = ("JAX's coordination service ran in it "
                            "(JACCL_COORDINATION_SERVICE=process0): JAX's runtime ends the others")
                elif args.keep_going:
                    then = "the others go on (--keep-going)"
                    if rank == 0 and budget:
                        then += ("; process 0 is not started again (it had not connected to "
                                 "JAX's coordination service, or the service could not be told)")
                else:
                    then = f"stopping the others in {args.grace:.0f} s"
                with lock:
                    out.write(f"jaccl-run: {words}; {then}\n".encode())
                    out.flush()

        while any(p.poll() is None for p in procs):
            name_the_failed()
            if (not args.keep_going and failed_at is not None and
                    time.monotonic() - failed_at > args.grace):
                _kill(procs, signal.SIGKILL)
            time.sleep(0.05)
        name_the_failed(may_restart=False)  # those that ended since the last look
        if args.keep_going and lost:
            finished = [rank for rank, p in enumerate(procs) if p.returncode == 0]
            again = f", {sum(restarts)} restarted" if sum(restarts) else ""
            with lock:
                out.write(f"jaccl-run: {len(finished)} of {len(procs)} processes finished{again}; "
                          f"lost: {'; '.join(w for w, _ in lost.values())}\n".encode())  # in the order lost
                out.flush()
            if finished:
                return 0
        code = next(iter(lost.values()))[1] if lost else 0  # the first failure's
        return code if code >= 0 else 128 - code
    finally:
        _kill(procs, signal.SIGTERM)
        deadline = time.monotonic() + 3
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        _kill(procs, signal.SIGKILL)
        for p in procs:
            p.wait()
        for t in pumps:
            t.join(timeout=2)
        for path in glob.glob(f"/dev/shm/jaccl-{job}-*"):
            try:
                os.unlink(path)
            except OSError:
                pass
        if service is not None:
            service.shutdown()


def main(argv=None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        sys.exit(run(args))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
