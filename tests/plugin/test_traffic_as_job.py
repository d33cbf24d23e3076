"""Where the bytes go, as one pytest-plugin job on 2 emulated hosts in network namespaces (veth
links; as root, skipped with the reason otherwise), 2 processes each: an all_reduce of S bytes
per process, run `ITERS` times, must put on each host's links what its algorithm sends. The
hierarchical schedule sends S per host per call (2(H-1)/H of the buffer, from the L processes
of a host owning S/L each), the flat mesh 2S; a collective inside each host sends nothing.
Each host's first process reads its namespace's tx_bytes counters around the calls and checks
them, less what TCP sent again (a loaded machine retransmits: 64 KiB in one window here beside
two CPU hogs); measured here: 1.002 and 2.004 of the payload (frame and TCP/IP headers; veth
offloads segmentation)."""

from __future__ import annotations

import glob
import re
import subprocess
import time

import jax
import numpy as np
import pytest
from jax._src import distributed
from jax.sharding import NamedSharding, PartitionSpec as P

import jax_jaccl as jaccl

SIZE = 4 << 20  # bytes per process
ITERS = 5


def tx_bytes() -> int:
    """What this host sent over its links so far (the namespace's veth ends, named to*), once
    they fell quiet: a call completes on a rank while the host's other process may still have
    frames of its own in its sockets (a frame leaves when the kernel sends it), which would
    count in the next window."""
    def now():
        return sum(int(open(p).read())
                   for p in glob.glob("/sys/class/net/to*/statistics/tx_bytes"))
    seen, deadline = now(), time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.05)
        again = now()
        if again == seen:
            return seen
        seen = again
    return seen


def retransmitted() -> int:
    """The payload bytes TCP sent again so far on this host's open connections (their
    bytes_retrans, as `ss` reads it from the namespace's sockets, both processes')."""
    out = subprocess.run(["ss", "-tinH"], capture_output=True, text=True, check=True).stdout
    return sum(int(n) for n in re.findall(r"\bbytes_retrans:(\d+)", out))


def bytes_sent(algorithm: str, axes) -> tuple[int, int]:
    """This host's tx bytes over ITERS all_reduce calls less TCP's retransmissions (and those,
    for the record), and nothing else: a small all_reduce over everyone after the calls
    completes only once every host finished them (so all their frames were delivered), and
    nobody sends before every host read its counters, at the start and at the end (barriers of
    JAX's coordination service, whose traffic has links of its own: without the second, the
    host's other process, done first, began the next case's warm-up call and its frames counted
    here, 1.10 S where the schedule sends S, twice in CI)."""
    n, hosts = jax.device_count(), jaccl.init().host_count
    mesh = jax.make_mesh((hosts, n // hosts), ("host", "local"))
    spec = P(("host", "local"))

    def sharded(shape):
        return jax.make_array_from_callback(shape, NamedSharding(mesh, spec), lambda i: np.ones(shape, np.float32)[i])

    def all_reduce(over, algo):
        return jax.jit(jax.shard_map(lambda v: jaccl.all_reduce(v, over, algorithm=algo), mesh=mesh,
                                     in_specs=spec, out_specs=spec))

    x, one = sharded((n * SIZE // 4,)), sharded((n,))
    measured, barrier = all_reduce(axes, algorithm), all_reduce(("host", "local"), "auto")
    measured(x).block_until_ready()
    barrier(one).block_until_ready()
    before, resent_before = tx_bytes(), retransmitted()
    distributed.global_state.client.wait_at_barrier(f"traffic-{algorithm}-{axes}", 60_000)
    for _ in range(ITERS):
        y = measured(x)
    y.block_until_ready()
    barrier(one).block_until_ready()
    summed = n if axes != "local" else n // hosts
    assert float(np.asarray(y.addressable_shards[0].data)[0]) == summed
    after = tx_bytes()
    resent = retransmitted() - resent_before
    distributed.global_state.client.wait_at_barrier(f"traffic-{algorithm}-{axes}-read", 60_000)
    return after - before - resent, resent


@pytest.mark.jax_processes(4, hosts=2, network="namespaces", env={"JACCL_TRANSPORT": "tcp"}, timeout=200)
def test_bytes_on_the_links_match_the_algorithm(jax_job):
    sent = {case: bytes_sent(*case) for case in
            (("hierarchical", ("host", "local")), ("mesh", ("host", "local")), ("auto", "local"))}
    if jax_job.process_index % (jax_job.process_count // jax_job.host_count):
        return  # the host's first process checks its links
    payload = SIZE * ITERS
    (hierarchical, _), (mesh, _), (local, _) = sent.values()
    assert payload <= hierarchical <= 1.05 * payload, (sent, payload)
    assert 2 * payload <= mesh <= 2.1 * payload, (sent, payload)
    assert local < 0.01 * payload, sent  # heartbeats only: shared memory carries it all
