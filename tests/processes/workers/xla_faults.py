"""An unchanged JAX program whose collectives XLA emits (jit with shardings: an all-reduce)
meets a failure, run by jaccl-run with XLA's collectives on jaccl.

    python xla_faults.py {stall,disagree}

Both processes run the program once (it must agree), print `READY`, then:
- stall: the last process sleeps for 3 x JACCL_TIMEOUT before its next collective; the others'
  collective must end in an error within the deadline;
- disagree: the last process sums rows of 5 columns where the others sum rows of 3.
Each process prints `RAISED <seconds> <first line of the error>` if its collective failed, or
`FINISHED` if it completed."""

import os
import sys
import time

import numpy as np

import jax_jaccl.distributed

jax_jaccl.distributed.initialize()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from jax_jaccl import _transparent  # noqa: E402

MODE = sys.argv[1]
n, me = jax.process_count(), jax.process_index()
assert n > 1 and _transparent.active(), _transparent.problem()
mesh = Mesh(np.array(jax.devices()), ("x",))
last = me == n - 1


def summed(columns):
    v = np.ones((2 * n, columns), np.float32)
    x = jax.make_array_from_callback(v.shape, NamedSharding(mesh, P("x")), lambda i: v[i])
    return jax.jit(lambda a: jnp.sum(a, axis=0), out_shardings=NamedSharding(mesh, P()))(x)


assert float(summed(3)[0]) == 2 * n
print("READY", flush=True)
if MODE == "stall" and last:
    time.sleep(3 * float(os.environ["JACCL_TIMEOUT"]))
start = time.monotonic()
try:
    summed(5 if MODE == "disagree" and last else 3).block_until_ready()
    print("FINISHED", flush=True)
except Exception as e:  # noqa: BLE001 - the error is what the test reads
    print(f"RAISED {time.monotonic() - start:.2f} {str(e).splitlines()[0][:600]}", flush=True)
    os._exit(3)
