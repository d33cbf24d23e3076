"""jaccl-run: start a multi-process JAX job on this machine.

    jaccl-run -n N [--devices-per-process L] [--grace S] [--] python script.py args...

Starts N copies of the command, each with JACCL_COORDINATOR (a free port on 127.0.0.1),
JACCL_NUM_PROCESSES, JACCL_PROCESS_ID, JACCL_LOCAL_DEVICES and JACCL_JOB_ID set for
jax_jaccl.distributed.initialize(). Each line of output is prefixed with "[rank] ". When a
process fails, the others get `--grace` seconds to report their own errors and are then
killed; jaccl-run exits with the first failure's code (0 if all succeed). On exit it kills
whatever is left and removes the job's shared-memory names from /dev/shm.
"""

from __future__ import annotations

import argparse
import glob
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse(argv):
    parser = argparse.ArgumentParser(prog="jaccl-run", description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--nprocs", type=int, required=True, help="processes to start")
    parser.add_argument("--devices-per-process", type=int, default=1,
                        help="CPU devices per process (jax_num_cpu_devices)")
    parser.add_argument("--grace", type=float, default=None,
                        help="seconds the others may run after one fails (default: JACCL_TIMEOUT + 5)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="command to run (after --)")
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command given")
    if args.nprocs < 1 or args.devices_per_process < 1:
        parser.error("-n and --devices-per-process must be positive")
    if args.grace is None:
        args.grace = float(os.environ.get("JACCL_TIMEOUT", "120")) + 5
    return args


def _pump(rank: int, stream, out, lock) -> None:
    for line in iter(stream.readline, b""):
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


def run(args) -> int:
    port = free_port()
    job = os.environ.get("JACCL_JOB_ID") or secrets.token_hex(6)
    out = sys.stdout.buffer
    lock = threading.Lock()
    procs, pumps = [], []
    try:
        for rank in range(args.nprocs):
            env = dict(os.environ,
                       JACCL_COORDINATOR=f"127.0.0.1:{port}",
                       JACCL_NUM_PROCESSES=str(args.nprocs),
                       JACCL_PROCESS_ID=str(rank),
                       JACCL_LOCAL_DEVICES=str(args.devices_per_process),
                       JACCL_JOB_ID=job,
                       PYTHONUNBUFFERED="1")
            p = subprocess.Popen(args.command, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, start_new_session=True)
            procs.append(p)
            t = threading.Thread(target=_pump, args=(rank, p.stdout, out, lock), daemon=True)
            t.start()
            pumps.append(t)
        code, failed_at = 0, None
        while any(p.poll() is None for p in procs):
            for rank, p in enumerate(procs):
                rc = p.poll()
                if rc not in (None, 0) and failed_at is None:
                    code, failed_at = rc, time.monotonic()
                    with lock:
                        out.write(f"jaccl-run: process {rank} exited with {rc}; stopping the others "
                                  f"in {args.grace:.0f} s\n".encode())
                        out.flush()
            if failed_at is not None and time.monotonic() - failed_at > args.grace:
                _kill(procs, signal.SIGKILL)
            time.sleep(0.05)
        if code == 0:
            code = next((p.returncode for p in procs if p.returncode != 0), 0)
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


def main(argv=None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        sys.exit(run(args))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
