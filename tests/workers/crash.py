"""Runs one jaccl all_reduce over every device of the job, then crashes as asked (`abort`:
os.abort(), SIGABRT; `segv`: a read of address 0, SIGSEGV) in the process `--who` names (every
process by default), with no core file. Alone (1 process x 2 CPU devices) or under jaccl-run."""
import argparse
import ctypes
import os
import resource

parser = argparse.ArgumentParser()
parser.add_argument("how", choices=["abort", "segv"])
parser.add_argument("--who", type=int, default=None)
args = parser.parse_args()
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

import jax  # noqa: E402

if "JACCL_PROCESS_ID" not in os.environ:
    jax.config.update("jax_num_cpu_devices", 2)
import jax_jaccl as jaccl  # noqa: E402
import jax_jaccl.distributed  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

jax_jaccl.distributed.initialize()
n = jax.device_count()
mesh = jax.make_mesh((n,), ("i",))
x = jax.make_array_from_callback((n,), NamedSharding(mesh, P("i")),
                                 lambda index: np.arange(n, dtype=np.float32)[index])
total = jax.jit(jax.shard_map(lambda v: jaccl.all_reduce(v, "i"), mesh=mesh, in_specs=P("i"),
                              out_specs=P("i")))(x)
print("SUM", float(total.addressable_data(0)[0]), "processes", jax.process_count(), flush=True)
with open("/proc/self/maps") as maps:  # whether the handlers' libraries are in this process
    print("PSM", "loaded" if "libpsm" in maps.read() else "absent", flush=True)
if args.who is None or args.who == jax.process_index():
    if args.how == "abort":
        os.abort()
    ctypes.string_at(0)
