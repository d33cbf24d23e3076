"""Where a job's processes run: on emulated hosts (network namespaces, as root) or on this
machine's loopback with one JACCL_HOST_ID per emulated host; and the job's coordinator port.

Contract: Placement(processes, hosts, link_rate, job_id, network, ranks) makes what the job
needs and says how in `description` (network: "auto" = namespaces where they can be made, else
loopback; "loopback"; "namespaces", else NoNamespaces with the reason); rank_env(k) /
rank_prefix(k) give process k's environment and command prefix; host_of(k) its host, with
processes // hosts on each (ranks: "packed" = host 0 holds ranks 0..per_host-1, host 1 the
next ones, ...; "round-robin" = rank k on host k % hosts, as a scheduler that deals ranks out
over nodes does); close() removes the namespaces and the port reservation. Nothing outside the
job can take its coordinator port while it is reserved: JAX's coordinator sets SO_REUSEPORT,
so a port merely bound-and-closed could be shared silently by two jobs; the reservation is a
socket that holds the port with SO_REUSEPORT (which JAX's coordinator can still bind beside)
and never listens.
"""

from __future__ import annotations

import os
import socket

from .._emulated_hosts import EmulatedHosts, can_emulate


def reserve_port() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("0.0.0.0", 0))
    return s


RANK_ORDERS = ("packed", "round-robin")


class NoNamespaces(Exception):
    """network="namespaces" was asked for where none can be made; the message says why."""


class Placement:
    def __init__(self, processes: int, hosts: int, link_rate: str | None, job_id: str,
                 network: str = "auto", ranks: str = "packed"):
        if hosts < 1 or processes % hosts:
            raise ValueError(f"{processes} processes do not fill {hosts} hosts evenly")
        if ranks not in RANK_ORDERS:
            raise ValueError(f"ranks={ranks!r}: one of {RANK_ORDERS}")
        self.processes, self.hosts, self.per_host = processes, hosts, processes // hosts
        self.round_robin = ranks == "round-robin" and hosts > 1
        order = [f"rank k on host k % {hosts}"] if self.round_robin else []
        self.namespaces = None
        self.reservation = None
        why_not = can_emulate() if hosts > 1 and network != "loopback" else None
        if network == "namespaces" and why_not is not None:
            raise NoNamespaces(f"{hosts} hosts in network namespaces: {why_not}")
        if hosts > 1 and network != "loopback" and why_not is None:
            self.namespaces = EmulatedHosts(hosts, rate=link_rate, prefix=f"jpt-{job_id[:8]}")
            self.port = 23456  # each namespace has its own port space
            self.description = ", ".join([f"{hosts} emulated hosts: network namespaces with veth links"
                                          f"{' at ' + link_rate if link_rate else ''}", *order])
            return
        self.reservation = reserve_port()
        self.port = self.reservation.getsockname()[1]
        if hosts == 1:
            self.description = "1 host"
            return
        notes = ["JACCL_HOST_ID per host", *order]
        if why_not is not None:  # "auto" without namespaces: say what changed
            notes.append(f"no network namespaces: {why_not}")
            if link_rate:
                notes.append(f"link_rate {link_rate} not applied, loopback has no links to limit")
        self.description = f"{hosts} emulated hosts on this machine's loopback ({'; '.join(notes)})"

    def host_of(self, rank: int) -> int:
        return rank % self.hosts if self.round_robin else rank // self.per_host

    def rank_env(self, rank: int) -> dict:
        host = self.host_of(rank)
        env = {"JACCL_PROCESS_ID": str(rank), "JACCL_NUM_PROCESSES": str(self.processes),
               "JACCL_TEST_HOST_INDEX": str(host), "JACCL_TEST_HOSTS": str(self.hosts)}
        if self.namespaces is not None:
            entry = self.namespaces.hostfile(self.per_host)["hosts"][host]
            env["JACCL_COORDINATOR"] = f"{entry['coordinator_host']}:{self.port}"
            env["JACCL_IFNAME"] = entry["ifname"]
        else:
            env["JACCL_COORDINATOR"] = f"127.0.0.1:{self.port}"
            if self.hosts > 1:
                env["JACCL_HOST_ID"] = f"{os.uname().nodename}-emulated-{host}"
        return env

    def rank_prefix(self, rank: int) -> list[str]:
        return self.namespaces.exec_prefix(self.host_of(rank)) if self.namespaces is not None else []

    def close(self) -> None:
        if self.namespaces is not None:
            self.namespaces.close()
        if self.reservation is not None:
            self.reservation.close()
