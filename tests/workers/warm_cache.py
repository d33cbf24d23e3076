"""jax 0.12.1's gloo hangs running a program that a warm persistent compilation cache supplied.

    python warm_cache.py CACHE N PORT RANK     # plain JAX, gloo: start ranks 0..N-1
    jaccl-run -n N -- python warm_cache.py CACHE   # jaccl-run's job (XLA's collectives on jaccl)

Run the job twice with the same CACHE: the second run hangs on gloo (jax 0.12.1; 0.10.2 passes)
and passes on jaccl's engine. Each rank prints `OUT` and its shard of every result."""
import sys

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

cache, *plain = sys.argv[1:]
jax.config.update("jax_compilation_cache_dir", cache)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
if plain:
    n, port, rank = map(int, plain)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", n, rank)
else:
    import jax_jaccl.distributed
    jax_jaccl.distributed.initialize()
n, mesh = jax.device_count(), jax.make_mesh((jax.device_count(),), ("i",))
body = lambda x: (  # noqa: E731
    jax.lax.psum(x, "i"), jax.lax.pmax(x, "i"),
    jax.lax.psum_scatter(x, "i", scatter_dimension=1, tiled=True),
    jax.lax.all_gather(x, "i", tiled=True), jax.lax.all_to_all(x, "i", 1, 1, tiled=True),
    jax.lax.ppermute(x, "i", [(j, (j + 1) % n) for j in range(n)]))
step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i")))
data = np.arange(n * 4.0, dtype=np.float32).reshape(n, 4)
x = jax.make_array_from_callback(data.shape, NamedSharding(mesh, P("i")), lambda index: data[index])
print("OUT", jax.process_index(), [o.addressable_data(0).tolist() for o in step(x)], flush=True)
