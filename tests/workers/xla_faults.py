"""An unchanged JAX program whose collectives XLA emits (jit with shardings: an all-reduce)
meets a failure, run by jaccl-run with XLA's collectives on jaccl.

    python xla_faults.py {stall,disagree,order,meshes,groups}

Every process runs the program once (it must agree), prints `READY`, then:
- stall: the last process sleeps for 3 x JACCL_TIMEOUT before its next collective; the others'
  collective must end in an error within the deadline;
- disagree: the last process sums rows of 5 columns where the others sum rows of 3;
- order: a jaccl.all_reduce and a lax.psum of the same shape in one program, the jaccl op first
  on every process but the last, which takes the psum first: without their own sequence spaces
  they would pair and each get the other's data;
- meshes (2 devices per process): a psum over the devices of each process on a mesh in process
  order, then the same on a mesh whose odd processes list their devices in reverse, then one
  across processes on that mesh. The second's group is known (cached by XLA) on even processes
  and new on odd ones, so their devices split apart: the mpiabi library must say so on every
  process, never hand a process a communicator missing its peers.
- groups (one device per process, 4 processes): a psum with axis_index_groups [[0, 2], [1, 3]],
  then one with [[2, 0], [1, 3]]: XLA keys a group by its order, so processes 0 and 2 split
  MPI_COMM_WORLD for [2, 0] while 1 and 3 use their [1, 3] again; the splitting processes must
  time out saying what happened, never hang.
Each process prints `RAISED <seconds> <first line of the error>` if its collective failed, or
`FINISHED <values>` if it completed."""

import os
import sys
import time

import numpy as np

import jax_jaccl.distributed

jax_jaccl.distributed.initialize()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from jax_jaccl import _xla_collectives  # noqa: E402

MODE = sys.argv[1]
n, me = jax.process_count(), jax.process_index()
assert n > 1 and _xla_collectives.active(), _xla_collectives.problem()
assert (jax.local_device_count() > 1) == (MODE == "meshes")
assert n == 4 or MODE != "groups"
mesh = Mesh(np.array(jax.devices()), ("x",))
last = me == n - 1


def summed(columns):
    v = np.ones((2 * n, columns), np.float32)
    x = jax.make_array_from_callback(v.shape, NamedSharding(mesh, P("x")), lambda i: v[i])
    return jax.jit(lambda a: jnp.sum(a, axis=0), out_shardings=NamedSharding(mesh, P()))(x)


def jaccl_and_lax(jaccl_first):
    import jax_jaccl as jaccl
    from jax import lax

    def step(a, b):
        if jaccl_first:
            s = jaccl.all_reduce(a, "x")
            return s, lax.psum(b + 0 * s, "x")
        t = lax.psum(b, "x")
        return jaccl.all_reduce(a + 0 * t, "x"), t

    ones = jax.make_array_from_callback((n * 3,), NamedSharding(mesh, P("x")),
                                        lambda i: np.ones(3, np.float32))
    return jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P("x"), P("x")),
                                 out_specs=(P("x"), P("x"))))(ones, ones * 100)


def psums_on_two_meshes():
    from jax import lax

    local = jax.local_device_count()
    by_process = np.array(jax.devices()).reshape(n, local)
    twisted = np.array([row if p % 2 == 0 else row[::-1] for p, row in enumerate(by_process)])
    values = []
    for grid, axis in ((by_process, "l"), (twisted, "l"), (twisted, "p")):
        mesh2 = Mesh(grid, ("p", "l"))
        sharding = NamedSharding(mesh2, P("p", "l"))
        v = np.ones((n, local), np.float32)
        x = jax.make_array_from_callback(v.shape, sharding, lambda i: v[i])
        out = jax.jit(jax.shard_map(lambda t: lax.psum(t, axis), mesh=mesh2,
                                    in_specs=P("p", "l"), out_specs=P("p", "l")))(x)
        values.append(float(out.addressable_shards[0].data[0, 0]))
    return values


def psums_in_groups(groups):
    from jax import lax

    v = np.ones((n, 2), np.float32)
    x = jax.make_array_from_callback(v.shape, NamedSharding(mesh, P("x")), lambda i: v[i])
    out = jax.jit(jax.shard_map(lambda t: lax.psum(t, "x", axis_index_groups=groups), mesh=mesh,
                                in_specs=P("x"), out_specs=P("x"), check_vma=False))(x)
    return float(out.addressable_shards[0].data[0, 0])


if MODE != "meshes":
    assert float(summed(3)[0]) == 2 * n
if MODE == "groups":
    assert psums_in_groups([[0, 2], [1, 3]]) == 2
if MODE == "order":  # both communicators exist before the orders differ
    assert [float(v.addressable_shards[0].data[0]) for v in jaccl_and_lax(True)] == [n, 100 * n]
print("READY", flush=True)
if MODE == "stall" and last:
    time.sleep(3 * float(os.environ["JACCL_TIMEOUT"]))
start = time.monotonic()
try:
    if MODE == "order":
        values = [float(v.addressable_shards[0].data[0]) for v in jaccl_and_lax(not last)]
    elif MODE == "meshes":
        values = psums_on_two_meshes()
    elif MODE == "groups":
        values = [psums_in_groups([[2, 0], [1, 3]])]
    else:
        values = [float(summed(5 if MODE == "disagree" and last else 3)[0])]
    print("FINISHED", *values, flush=True)
except Exception as e:  # noqa: BLE001 - the error is what the test reads
    print(f"RAISED {time.monotonic() - start:.2f} {str(e).splitlines()[0][:1200]}", flush=True)
    os._exit(3)
