"""Layouts of the plugin's layout suites (test_battery_as_jobs.py, test_moe_as_jobs.py): one
pytest parameter per layout, carrying its `jax_processes` mark.

Contract: layout(nprocs, devices, hosts, transport, network, marks, ranks, settings, tag) is a
pytest.param of (nprocs, devices, hosts, transport) named e.g. "4x1-2hosts-lo-tcp" ("...-rr"
with ranks dealt round-robin over the hosts, "...-<tag>" with `settings`, JACCL_* variables of
every process, e.g. SMALL_FRAMES); between hosts the job runs over `transport` (jaccl's TCP by
default), on loopback hosts or in network namespaces. jax.lax, the reference, keeps JAX's own
collectives (gloo): a reference on jaccl's engine would share jaccl's mistakes."""

from __future__ import annotations


import pytest

from transports import OFI, OFI_MESSAGES, TCP, expected, needs_ofi  # noqa: F401 (re-exported)

TIMEOUT_S = 400


# The flow control at its tightest (every transport, within a host too): 4 KiB frames, 2 in
# flight, one socket a link (TCP), no busy wait.
SMALL_FRAMES = {"JACCL_FRAME_KB": "4", "JACCL_SLOTS": "2", "JACCL_TCP_SOCKETS": "1",
                "JACCL_SPIN_US": "0"}


def layout(nprocs, devices, hosts=1, transport=TCP, network="loopback", marks=(), ranks="packed",
           settings=None, tag=""):
    name = {id(OFI): "ofi", id(OFI_MESSAGES): "ofi-messages"}.get(id(transport), "tcp")
    where = "" if hosts == 1 else f"-{hosts}hosts-{'netns' if network == 'namespaces' else 'lo'}-{name}"
    where += "-rr" if ranks == "round-robin" else ""
    where += f"-{tag}" if tag else ""
    job = pytest.mark.jax_processes(nprocs, devices_per_process=devices, hosts=hosts, network=network,
                                    env={**(transport if hosts > 1 else {}), **(settings or {})},
                                    timeout=TIMEOUT_S, ranks=ranks, xla_collectives="gloo")
    return pytest.param(nprocs, devices, hosts, transport, id=f"{nprocs}x{devices}{where}",
                        marks=[job, *([marks] if marks else [])])
