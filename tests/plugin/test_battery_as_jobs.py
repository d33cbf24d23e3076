"""The collective battery (tests/support/process_battery.py: every collective against jax.lax,
several dtypes and shapes, each algorithm forced, a 2-D mesh) in multi-process layouts, as
pytest-plugin jobs: plain assertions on every device of every process. Layouts on one host;
on emulated hosts over loopback (one JACCL_HOST_ID per host) and in network namespaces (veth
links, as root; skipped with the reason otherwise), each over jaccl's TCP and, where marked,
over the OFI transport (libfabric's tcp provider). Results that must be bitwise equal on every
device (all_reduce, all_gather) are also compared across the job's processes. Two layouts deal
the ranks out round-robin over the hosts."""

from __future__ import annotations

import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import multihost_utils

import jax_jaccl as jaccl
import axis_orders
from job_layouts import OFI, OFI_MESSAGES, SMALL_FRAMES, expected, layout, needs_ofi
from process_battery import ALL_DTYPES, TRANSPORT_DTYPES, assert_equal_shards, run_battery


def same_on_every_process(digests: dict) -> None:
    """Every process computed the same {name: sha1 of the result}; compared over the job."""
    mine = np.frombuffer(hashlib.sha1(repr(sorted(digests.items())).encode()).digest()[:16], np.int32)
    every = np.asarray(multihost_utils.process_allgather(mine))
    differ = [k for k in range(len(every)) if not np.array_equal(every[k], every[0])]
    assert not differ, f"processes {differ} computed results other than process 0's"


# One layout per thing a layout can break, each covering the others' dimensions too: devices
# of a process with processes of a host (2x2), several processes alone (4x1); between
# emulated hosts jaccl's TCP with the hierarchical algorithms (4x1 on 2 hosts) and with several
# devices per process (2x2 on 2 hosts), libfabric with writes (2x2) and with messages (4 hosts);
# network namespaces (real veth links) over TCP on 4 hosts and libfabric on 2; ranks dealt
# round-robin over namespace hosts, 4 processes x 2 devices. The dtypes run in full on 2x2
# (groups within a process and across processes); the other layouts are there for a
# transport, an algorithm or a placement, which move and reduce every dtype alike: they run
# the battery's transport types (the forced algorithms, hierarchical included, and the
# frame-spanning sizes stay). The flow control runs at its tightest (SMALL_FRAMES: 4 KiB
# frames, 2 in flight, one socket a link, no busy wait) on each kind of channel: shared memory
# between processes (4x1), jaccl's TCP and libfabric between hosts (2x2 on 2 hosts), with a
# 16-bit type too: its messages span hundreds of frames, in sizes that divide by neither frames
# nor frames x lanes.
# The round-robin layout also runs every collective over the three axes of a 2 x 2 x 2 mesh
# in the mesh's order and reversed (tests/support/axis_orders.py), its ranks dealt over hosts
# in the most scrambled way; every order runs on one host (test_axis_orders_as_jobs.py: 2
# processes x 4 devices, groups within and across processes).
FOR_THEIR_TRANSPORT = {"4x1-small-frames", "4x1-2hosts-lo-tcp", "2x2-2hosts-lo-tcp-small-frames",
                       "2x2-2hosts-lo-ofi-small-frames", "4x1-4hosts-lo-ofi-messages",
                       "4x1-4hosts-netns-tcp", "4x1-2hosts-netns-ofi", "4x2-2hosts-netns-tcp-rr"}
LAYOUTS = [
    layout(2, 2), layout(4, 1, settings=SMALL_FRAMES, tag="small-frames"),
    layout(4, 1, 2), layout(2, 2, 2, settings=SMALL_FRAMES, tag="small-frames"),
    layout(2, 2, 2, OFI, marks=needs_ofi, settings=SMALL_FRAMES, tag="small-frames"),
    layout(4, 1, 4, OFI_MESSAGES, marks=needs_ofi),
    layout(4, 1, 4, network="namespaces"),
    layout(4, 1, 2, OFI, network="namespaces", marks=needs_ofi),
    layout(4, 2, 2, network="namespaces", ranks="round-robin"),
]
assert FOR_THEIR_TRANSPORT <= {p.id for p in LAYOUTS}, "a name above is not a layout's"
# (checks, results digested) each layout's battery runs: a battery that lost a section fails.
CHECKS = {"2x2": (514, 154), "4x1-small-frames": (240, 87), "4x1-2hosts-lo-tcp": (177, 64),
          "2x2-2hosts-lo-tcp-small-frames": (247, 91), "2x2-2hosts-lo-ofi-small-frames": (247, 91),
          "4x1-4hosts-lo-ofi-messages": (173, 62), "4x1-4hosts-netns-tcp": (173, 62),
          "4x1-2hosts-netns-ofi": (177, 64), "4x2-2hosts-netns-tcp-rr": (180, 66)}
assert set(CHECKS) == {p.id for p in LAYOUTS}


@pytest.mark.parametrize("nprocs, devices, hosts, transport", LAYOUTS)
def test_collectives_match_lax(jax_job, request, nprocs, devices, hosts, transport):
    assert (jax_job.process_count, jax_job.local_device_count) == (nprocs, devices)
    assert (jax_job.host_count, jaccl.init().host_count) == (hosts, hosts)
    assert jaccl.init().transport == (expected(transport) if hosts > 1 else "none")
    # jaccl groups the processes by host as the job placed them (packed or round-robin).
    placed = np.asarray(multihost_utils.process_allgather(np.int32(jax_job.host_index))).ravel()
    seen = jaccl.init().hosts
    assert [[seen[k] == seen[j] for j in range(nprocs)] for k in range(nprocs)] == \
        [[placed[k] == placed[j] for j in range(nprocs)] for k in range(nprocs)], (seen, placed)
    checked, digests = [], {}

    def compare(name, got, want, digest=False):
        results = assert_equal_shards(name, got, want)
        if digest:  # every device of this process, then every process, holds the same bytes
            hashes = {hashlib.sha1(np.ascontiguousarray(r).tobytes()).hexdigest() for r in results.values()}
            assert len(hashes) == 1, f"{name}: devices of process {jax_job.process_index} differ"
            digests[name] = hashes.pop()
        checked.append(name)

    name = request.node.callspec.id
    dtypes = TRANSPORT_DTYPES if name in FOR_THEIR_TRANSPORT else ALL_DTYPES
    if name.endswith("-small-frames"):
        settings = jaccl.init().settings
        assert (settings.frame_bytes, settings.slots, settings.tcp_sockets) == (4096, 2, 1)
        dtypes = TRANSPORT_DTYPES + (jnp.bfloat16,)
    run_battery(compare, hierarchical=hosts > 1 and jax.device_count() // hosts > 1, dtypes=dtypes)
    assert (len(checked), len(digests)) == CHECKS.get(name), (name, len(checked), len(digests))
    same_on_every_process(digests)
    if name == "4x2-2hosts-netns-tcp-rr":
        mesh = jax.make_mesh((2, 2, 2), ("x", "y", "z"))
        orders = [("x", "y", "z"), ("z", "y", "x")]
        assert axis_orders.check_every_order(mesh, assert_equal_shards, orders=orders) >= 2 * 23
