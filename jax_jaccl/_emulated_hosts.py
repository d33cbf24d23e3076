"""Several "hosts" on one machine: network namespaces joined by a full mesh of veth links.

Contract (needs root and iproute2):
- EmulatedHosts(n, rate=None) creates namespaces `<prefix>-0 .. <prefix>-(n-1)`. Host i has
  the address 10.77.<k>.<i+1> on an interface `jhost` (what jaccl listens on:
  JACCL_IFNAME=jhost) and one veth `to<j>` per other host j, with a route to host j's address
  through it, so every host pair has its own link. `rate` (e.g. "200mbit") puts a tc tbf
  qdisc on both ends of every link: each direction of each link carries at most `rate`
  (burst 256 KiB, queue 200 ms; JACCL_TBF_BURST / JACCL_TBF_LATENCY change them);
  `egress={i: rate}` limits everything host i sends to `rate` instead (a slow host).
- JAX's coordination traffic gets its own unlimited links (host 0 <-> host i, 172.31.i.0/24), so
  saturated data links cannot starve its heartbeats; the hostfile tells each host how to reach
  the coordinator through them ("coordinator_host").
- tx_bytes(i, j) reads the bytes host i sent on its link to host j.
- set_link(i, j, up) brings a link down or up; kill_host(i) SIGKILLs every process in host i.
- close() (also on context exit) kills every process left in the namespaces and deletes them
  (their veths go with them). hostfile() describes the hosts for `jaccl-run --hostfile`.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess

from . import _settings


def run(*args: str, check: bool = True) -> str:
    done = subprocess.run(list(args), capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def can_emulate() -> str | None:
    """None when this machine can create emulated hosts, else the reason it cannot."""
    if os.geteuid() != 0:
        return "emulated hosts need root (network namespaces)"
    for tool in ("ip", "tc"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            return f"emulated hosts need `{tool}` (apt-get install iproute2)"
    return None


class EmulatedHosts:
    def __init__(self, n: int, rate: str | None = None, prefix: str | None = None,
                 egress: dict | None = None):
        reason = can_emulate()
        if reason:
            raise RuntimeError(reason)
        self.n = n
        self.rate = rate
        self.egress = egress or {}  # host -> rate of everything that host sends (a slow host)
        self.prefix = prefix or f"jaccl-{secrets.token_hex(3)}"
        self.subnet = int(secrets.token_hex(1), 16) % 200 + 10
        self.namespaces = [f"{self.prefix}-{i}" for i in range(n)]
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    def address(self, i: int) -> str:
        return f"10.77.{self.subnet}.{i + 1}"

    def _create(self) -> None:
        link = _settings.current()  # JACCL_TBF_BURST / JACCL_TBF_LATENCY shape the limited links
        for i, ns in enumerate(self.namespaces):
            run("ip", "netns", "add", ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
            # The host's own address sits on `jhost`, one end of a veth pair kept inside the
            # namespace (a stand-in for a dummy interface, which not every kernel has).
            run("ip", "-n", ns, "link", "add", "jhost", "type", "veth", "peer", "name", "jhost-peer")
            run("ip", "-n", ns, "addr", "add", f"{self.address(i)}/32", "dev", "jhost")
            run("ip", "-n", ns, "link", "set", "jhost-peer", "up")
            run("ip", "-n", ns, "link", "set", "jhost", "up")
        for i in range(self.n):
            for j in range(i + 1, self.n):
                a, b = self.namespaces[i], self.namespaces[j]
                run("ip", "link", "add", f"to{j}", "netns", a, "type", "veth", "peer", "name",
                    f"to{i}", "netns", b)
                for ns, dev, peer, me in ((a, f"to{j}", j, i), (b, f"to{i}", i, j)):
                    run("ip", "-n", ns, "link", "set", dev, "up")
                    run("ip", "-n", ns, "route", "add", f"{self.address(peer)}/32", "dev", dev,
                        "src", self.address(me))
                    rate = self.egress.get(me, self.rate)
                    if rate:
                        run("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                            rate, "burst", link.tbf_burst, "latency", link.tbf_latency)
        for i in range(1, self.n):
            run("ip", "link", "add", f"ctl{i}", "netns", self.namespaces[0], "type", "veth",
                "peer", "name", "ctl0", "netns", self.namespaces[i])
            for ns, dev, address in ((self.namespaces[0], f"ctl{i}", f"172.31.{i}.1/24"),
                                     (self.namespaces[i], "ctl0", f"172.31.{i}.2/24")):
                run("ip", "-n", ns, "addr", "add", address, "dev", dev)
                run("ip", "-n", ns, "link", "set", dev, "up")

    def exec_prefix(self, i: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[i]]

    def hostfile(self, processes_per_host: int) -> dict:
        return {"hosts": [{"prefix": self.exec_prefix(i), "address": self.address(i),
                           "coordinator_host": self.address(0) if i == 0 else f"172.31.{i}.1",
                           "ifname": "jhost", "processes": processes_per_host}
                          for i in range(self.n)]}

    def write_hostfile(self, path: str, processes_per_host: int) -> str:
        with open(path, "w") as f:
            json.dump(self.hostfile(processes_per_host), f, indent=1)
        return path

    def tx_bytes(self, i: int, j: int) -> int:
        info = json.loads(run("ip", "-n", self.namespaces[i], "-j", "-s", "link", "show", f"to{j}"))
        return int(info[0]["stats64"]["tx"]["bytes"])

    def set_link(self, i: int, j: int, up: bool) -> None:
        run("ip", "-n", self.namespaces[i], "link", "set", f"to{j}", "up" if up else "down")

    def pids(self, i: int) -> list[int]:
        out = run("ip", "netns", "pids", self.namespaces[i], check=False)
        return [int(p) for p in out.split()]

    def kill_host(self, i: int) -> None:
        for pid in self.pids(i):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        for i, ns in enumerate(self.namespaces):
            self.kill_host(i)
            run("ip", "netns", "del", ns, check=False)

    def __enter__(self) -> "EmulatedHosts":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def leftover_namespaces(prefix: str = "jaccl-") -> list[str]:
    return [line.split()[0] for line in run("ip", "netns", "list", check=False).splitlines()
            if line.startswith(prefix)]
