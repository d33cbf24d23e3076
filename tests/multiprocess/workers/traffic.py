"""Counts the bytes a host sends to the other hosts while collectives run: the first
process of each host prints `TX <bytes>`, the growth of tx_bytes summed over its links
(/sys/class/net/to*/statistics, inside the host's network namespace), over `--iters` calls."""

from __future__ import annotations

import glob

from common import start

args, index, count = start(__doc__, {
    "--algorithm": dict(default="auto"),
    "--bytes": dict(type=int, default=8 << 20),
    "--iters": dict(type=int, default=5),
    "--axis": dict(default="all", choices=["all", "local"]),
})

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import jax_jaccl as jaccl  # noqa: E402

world = jaccl.init()
hosts = world.host_count
mesh = jax.make_mesh((hosts, len(jax.devices()) // hosts), ("host", "local"))
axes = ("host", "local") if args.axis == "all" else "local"
per_device = args.bytes // 4
shape = (len(jax.devices()) * per_device,)
x = jax.make_array_from_callback(shape, NamedSharding(mesh, P(("host", "local"))),
                                 lambda i: np.ones(shape, np.float32)[i])
f = jax.jit(jax.shard_map(lambda v: jaccl.all_reduce(v, axes, algorithm=args.algorithm),
                          mesh=mesh, in_specs=P(("host", "local")), out_specs=P(("host", "local"))))


def tx() -> int:
    return sum(int(open(p).read()) for p in glob.glob("/sys/class/net/to*/statistics/tx_bytes"))


# A small all_reduce over everyone completes only after every other host finished the calls
# before it, so every frame this host sent for them has been delivered: the window below
# holds exactly `iters` calls.
one = jax.make_array_from_callback((len(jax.devices()),), NamedSharding(mesh, P(("host", "local"))),
                                   lambda i: np.ones(len(jax.devices()), np.float32)[i])
barrier = jax.jit(jax.shard_map(lambda v: jaccl.all_reduce(v, ("host", "local")), mesh=mesh,
                                in_specs=P(("host", "local")), out_specs=P(("host", "local"))))
f(x).block_until_ready()
barrier(one).block_until_ready()
first_on_host = world.hosts.index(world.hosts[index]) == index
before = tx()
# Nobody starts the measured calls before every host has read its counters (a barrier of
# JAX's coordination service, whose traffic has links of its own).
from jax._src import distributed  # noqa: E402

distributed.global_state.client.wait_at_barrier("traffic-start", 60_000)
for _ in range(args.iters):
    y = f(x)
y.block_until_ready()
barrier(one).block_until_ready()
expected = len(jax.devices()) if args.axis == "all" else len(jax.devices()) // hosts
assert float(np.asarray(y.addressable_shards[0].data)[0]) == expected
if first_on_host:
    print(f"TX {tx() - before}", flush=True)
print("DONE", flush=True)
