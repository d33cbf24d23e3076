"""One process, 4 CPU devices on at most 2 cores: the README quickstart's step, 200 times with
jaccl's ops and 200 times with jax.lax's, dispatched asynchronously as a training loop does. On
jaxlib < 0.12.1 that deadlocks in XLA's CPU pool unless jaccl made room (_cpu_pool). Prints
`NPROC <value or unset>` and `LOSSES <jaccl's> <jax.lax's>` (float32 bits in hex)."""

import os

os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])  # XLA sizes its pool from these

from functools import partial  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 4)  # before jaccl's engine loads: it reads this

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from jax_jaccl import lax as jaccl_lax  # noqa: E402

print("NPROC", os.environ.get("NPROC", "unset"), flush=True)
mesh = jax.make_mesh((4,), ("data",))


def make_step(lax):
    @jax.jit
    @partial(jax.shard_map, mesh=mesh, in_specs=P("data"), out_specs=(P("data"), P()))
    def step(w_shard, x, y):
        w = lax.all_gather(w_shard, "data", tiled=True)
        value, grad = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
        grad = lax.psum_scatter(grad, "data", tiled=True) / lax.axis_size("data")
        return w_shard - 0.1 * grad, lax.pmean(value, "data")
    return step


rows = NamedSharding(mesh, P("data"))
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 32)).astype(np.float32)
x, y = (jax.device_put(a, rows) for a in (x, x @ np.linspace(-1, 1, 32, dtype=np.float32)[:, None]))
losses = []
for lax in (jaccl_lax, jax.lax):
    step, w = make_step(lax), jax.device_put(np.zeros((32, 1), np.float32), rows)
    for _ in range(200):
        w, value = step(w, x, y)
    losses.append(np.float32(value).view(np.uint32))
print("LOSSES", *(f"{bits:08x}" for bits in losses), flush=True)
