"""JAX's coordination service as jaccl-run runs it, so that a job survives its process 0.

Contract: start(where, port, processes) -> a service, or None where process 0 is to run it
(JAX's way). jaccl-run --keep-going runs the service itself, recoverable (a lost process does
not end the others), unless JACCL_COORDINATION_SERVICE=process0 in its environment keeps it in
process 0: on this machine in jaccl-run's own process (Here); where the hosts are reached by ssh
or a command prefix, in a helper started on the first host the way its processes are
(OnFirstHost: `python -m jax_jaccl._service PORT PROCESSES HEARTBEAT_S SHUTDOWN_S`), at the port
and address the hosts reach the coordinator at, as they would process 0's. A service has
report_lost(process, topology_again) (what _compat.report_lost does; raises where the service
could not be told) and shutdown().

The helper says "listening" on its stdout once its service runs; then it reads one line per
loss on its stdin ("lost PROCESS 0|1"), tells its service over 127.0.0.1, and answers "told" or
"failed: <why>"; when its stdin closes (jaccl-run ended, or died) it shuts the service down and
exits. Losing the first host itself still ends the job: the service lived there.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading

from . import _settings

_REPORT_TIMEOUT_S = 10


def start(where, port: int, processes: int):
    """The service for a job of `processes` at `port`. `where(arguments)` is the (argv, env)
    that runs the job's python with `arguments` on the first host; None when every host is this
    machine."""
    launch = _settings.launch()
    if launch.coordination_service == "process0":
        return None
    if where is None:
        return Here(port, processes, launch.heartbeat_timeout_s, launch.shutdown_timeout_s)
    return OnFirstHost(where, port, processes, launch.heartbeat_timeout_s,
                       launch.shutdown_timeout_s, launch.init_timeout_s)


class Here:
    """The service in this process."""

    def __init__(self, port: int, processes: int, heartbeat_s: float, shutdown_s: float):
        from ._compat import start_coordination_service

        self.port = port
        self._service = start_coordination_service(f"[::]:{port}", processes, heartbeat_s,
                                                   shutdown_s)

    def report_lost(self, process: int, topology_again: bool) -> None:
        from ._compat import report_lost

        report_lost(f"127.0.0.1:{self.port}", process, timeout_s=_REPORT_TIMEOUT_S,
                    topology_again=topology_again)

    def shutdown(self) -> None:
        self._service.shutdown()


class OnFirstHost:
    """The service in a helper process on the first host, told of losses through its stdin."""

    def __init__(self, where, port: int, processes: int, heartbeat_s: float, shutdown_s: float,
                 wait_s: float):
        from .launch import _die_with_launcher

        argv, env = where(["-m", "jax_jaccl._service", str(port), str(processes),
                           str(heartbeat_s), str(shutdown_s)])
        self._proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      start_new_session=True, preexec_fn=_die_with_launcher)
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        answer = self._answer(wait_s)
        if answer != "listening":
            self.shutdown()
            raise RuntimeError(f"jaccl-run: JAX's coordination service did not start on the "
                               f"first host ({answer}; its errors are above)")

    def _read(self) -> None:
        for line in iter(self._proc.stdout.readline, b""):
            self._lines.put(line.decode(errors="replace").strip())
        self._lines.put(None)

    def _answer(self, timeout_s: float) -> str:
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            return f"no answer in {timeout_s:.0f} s"
        return "it exited" if line is None else line

    def report_lost(self, process: int, topology_again: bool) -> None:
        try:
            self._proc.stdin.write(f"lost {process} {int(topology_again)}\n".encode())
            self._proc.stdin.flush()
        except OSError as e:
            raise RuntimeError(f"the helper that runs it is gone ({e})") from None
        answer = self._answer(_REPORT_TIMEOUT_S + 5)
        if answer != "told":
            raise RuntimeError(answer)

    def shutdown(self) -> None:
        try:
            self._proc.stdin.close()  # the helper stops its service and exits
            self._proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait()


def main(argv: list[str]) -> None:
    port, processes, heartbeat_s, shutdown_s = int(argv[0]), int(argv[1]), *map(float, argv[2:4])
    service = Here(port, processes, heartbeat_s, shutdown_s)
    print("listening", flush=True)
    try:
        for line in sys.stdin:
            _, process, again = line.split()
            try:
                service.report_lost(int(process), again == "1")
                print("told", flush=True)
            except Exception as e:  # noqa: BLE001 - jaccl-run says why; the job goes on
                print("failed: " + " ".join(str(e).split()), flush=True)
    finally:
        service.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
