"""Two collectives of one program in different chains, in flight on one device at once.

Modes:
- opposite: each rank's program calls jaccl's all_reduce handler twice (jax.ffi.ffi_call, with
  the sites and lanes a lowering would give two chains: call A in lane 0, call B in lane 1, or
  both in lane 0 with JACCL_LANES=1) on independent operands, and delays one call's operand by
  a chain of matmuls: the first process delays A, the others B. XLA:CPU starts each call as
  soon as its operand is ready, so the first process is in B while the others are in A, each
  waiting for the other's. With lanes both complete on every rank; with one lane the ranks
  disagree.
- chains: a shard_map program whose two nested jits each all-reduce, loop and all-reduce again
  (two chains, so two lanes: _ordering.lane_of), checked against numpy; prints `LANES` with the
  lane of each collective read from the lowered text (its `lane` attribute).

Each rank prints `RESULT ok` if every result equals numpy's, `WRONG <detail>` if one differs,
`RAISED <seconds> <message>` if a collective failed (seconds since the calls began)."""

from __future__ import annotations

import re
import sys
import time

from common import start

args, index, count = start(__doc__, {"mode": dict(choices=["opposite", "chains"]),
                                     "--repeats": dict(type=int, default=5),
                                     "--elements": dict(type=int, default=262144)})

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import jax_jaccl as jaccl  # noqa: E402
from jax_jaccl import _ext, _settings  # noqa: E402

n = len(jax.devices())
mesh = jax.make_mesh((n,), ("x",))
ELEMENTS = args.elements  # per device: 1 MiB of float32 by default (every call on its lane's
# thread); below JACCL_ASYNC_MIN_KB lane 0's calls run on XLA's thread
put = lambda a: jax.make_array_from_callback(  # noqa: E731
    a.shape, NamedSharding(mesh, P("x")), lambda i: a[i])


def delayed(u):
    """u plus a zero that XLA computes with 20 matmuls of 512x512 first: thunks of the caller's
    own sequence, so a blocking call holds them up (spin()'s loop, one while thunk, may run on
    another of XLA's threads and make the blocking case pass or fail by timing)."""
    m = jnp.eye(512, dtype=u.dtype)
    acc = m * u[0]
    for _ in range(20):
        acc = jnp.tanh(acc @ m)
    return u + 0.0 * jnp.sum(acc)


def opposite_program():
    """The program of the `opposite` mode and the operands it reduces."""
    jaccl.init()  # jaccl's ops start the engine when lowered; a bare ffi_call does not
    groups = np.array([d.id for d in mesh.devices.flat], np.int64)
    site_a, site_b = 0x5A17E0A, 0x5A17E0B
    _ext.engine.name_site(site_a, "lanes.py call A")
    _ext.engine.name_site(site_b, "lanes.py call B")
    lane_b = 1 if _settings.current().lanes > 1 else 0
    order = jax.ShapeDtypeStruct((), jnp.int32)

    def call(v, site, lane):
        result = jax.ffi.ffi_call("jaccl_all_reduce", [order, jax.ShapeDtypeStruct(v.shape, v.dtype)],
                                  has_side_effect=True)
        return result(jnp.zeros((), jnp.int32), v, groups=groups, group_size=np.int64(n),
                      site=np.int64(site), lane=np.int64(lane), op=np.int64(0),
                      algorithm=np.int64(0), comm=np.int64(0))  # 0: the engine derives it

    def body(v, w):
        if index == 0:
            a, b = call(delayed(v), site_a, 0), call(w, site_b, lane_b)
        else:
            a, b = call(v, site_a, 0), call(delayed(w), site_b, lane_b)
        # Independent work: XLA:CPU runs programs of more than 8 thunks on its dataflow
        # executor. The order words are outputs too, so XLA reuses no buffer of one call for
        # the other's operands (a reuse would order them).
        busy = sum(jnp.sum(jnp.sin(v[:8] * k)) for k in range(12))
        words = jnp.stack([busy, a[0].astype(jnp.float32), b[0].astype(jnp.float32)])
        return a[1], b[1], words

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P("x")),
                                 out_specs=(P("x"), P("x"), P("x"))))
    v = np.arange(n * ELEMENTS, dtype=np.float32) % 97
    w = (np.arange(n * ELEMENTS, dtype=np.float32) % 89) * -1.0
    return step, (put(v), put(w)), [np.tile(v.reshape(n, -1).sum(0), n),
                                    np.tile(w.reshape(n, -1).sum(0), n)]


def spin(v, turns):
    """`turns` rounds of a small matmul on `v`'s first rows, then v plus a zero made from them."""
    m = jnp.eye(64, dtype=v.dtype) * 0.5
    acc = jax.lax.fori_loop(0, turns, lambda _, acc: jnp.tanh(acc @ m), v[:64, :64])
    return v + 0.0 * jnp.sum(acc)


@jax.jit
def chain_one(v, turns):
    return jaccl.all_reduce(spin(jaccl.all_reduce(v, "x"), turns), "x")


@jax.jit
def chain_two(v, turns):
    return jaccl.all_reduce(spin(jaccl.all_reduce(v, "x"), turns), "x")


def chains_program():
    """The program of the `chains` mode (the first device loops long in chain one, the others
    in chain two) and the operands it reduces."""
    def body(a, b):
        me = jax.lax.axis_index("x")
        return (chain_one(a, jnp.where(me == 0, 2000, 0)),
                chain_two(b, jnp.where(me == 0, 0, 2000)))

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P("x")),
                                 out_specs=(P("x"), P("x"))))
    shape = (n * ELEMENTS // 256, 256)
    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 97
    b = (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 89) * -1.0
    twice = lambda x: np.tile(n * x.reshape(n, -1, 256).sum(0), (n, 1))  # noqa: E731
    operands = (put(a), put(b))
    lanes = re.findall(r"\blane = (-?\d+) : i64", step.lower(*operands).as_text())
    print("LANES " + " ".join(lanes), flush=True)
    return step, operands, [twice(a), twice(b)]


step, operands, wanted = opposite_program() if args.mode == "opposite" else chains_program()
step.lower(*operands).compile()
began = time.monotonic()
try:
    for _ in range(args.repeats):
        results = step(*operands)
        for got, want in zip(results, wanted):
            for shard in got.addressable_shards:
                np.testing.assert_array_equal(np.asarray(shard.data), want[shard.index])
except AssertionError as e:
    print("WRONG " + " ".join(str(e).split())[:300], flush=True)
    sys.exit(4)
except Exception as e:  # noqa: BLE001
    print(f"RAISED {time.monotonic() - began:.2f} " + " ".join(str(e).split()), flush=True)
    sys.exit(3)
print("RESULT ok", flush=True)
