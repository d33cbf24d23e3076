"""Emulated hosts for the multi-host suites: network namespaces joined by veth links
(jax_jaccl/_emulated_hosts.py). Skipped, with the reason, where they cannot be made
(not root, no iproute2). Every test leaves no namespace behind."""

from __future__ import annotations

import pytest

from jax_jaccl._emulated_hosts import EmulatedHosts, can_emulate, leftover_namespaces

REASON = can_emulate()


@pytest.fixture
def make_hosts():
    made = []

    def make(n, rate=None):
        hosts = EmulatedHosts(n, rate=rate)
        made.append(hosts)
        return hosts

    if REASON:
        pytest.skip(REASON)
    yield make
    for hosts in made:
        hosts.close()
        assert not [ns for ns in leftover_namespaces() if ns.startswith(hosts.prefix)]
