"""Every FFI handler turns every failure into an error XLA raises, never an exception across
the FFI boundary or an abort: each case calls a handler directly (jax.ffi.ffi_call, past every
trace-time check of jax_jaccl's ops) with what those checks stop, in a process of its own, and
expects a Python exception naming the problem and a process that goes on."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

CALL = textwrap.dedent("""
    import sys
    import jax, jax.numpy as jnp, numpy as np
    jax.config.update("jax_num_cpu_devices", 4)
    from jax.sharding import NamedSharding, PartitionSpec as P
    import jax_jaccl as jaccl
    jaccl.init()
    mesh = jax.make_mesh((4,), ("x",))
    groups = np.arange(4, dtype=np.int64)
    case = sys.argv[1]

    def order():
        return jnp.zeros((), jnp.int32)

    def call(target, operands, results, **attrs):
        attrs = {k: (np.int64(v) if np.isscalar(v) else v)
                 for k, v in {"lane": 0, "comm": 0, **attrs}.items()}
        return jax.ffi.ffi_call(target, [jax.ShapeDtypeStruct((), jnp.int32)] + results,
                                has_side_effect=True)(order(), *operands, **attrs)[1]

    def body(v):
        if case == "element-type":
            x = v.astype(jnp.float8_e4m3fn)
            return call("jaccl_all_reduce", [x], [jax.ShapeDtypeStruct(x.shape, x.dtype)],
                        groups=groups, group_size=4, site=0, op=0, algorithm=0).astype(jnp.float32)
        if case == "comm-id":  # an id that is not its table's (the lowering computes it)
            return call("jaccl_all_reduce", [v], [jax.ShapeDtypeStruct(v.shape, v.dtype)],
                        groups=groups, group_size=4, site=0, op=0, algorithm=0, comm=12345)
        if case == "no-group":
            return call("jaccl_all_reduce", [v], [jax.ShapeDtypeStruct(v.shape, v.dtype)],
                        groups=np.arange(4, 8, dtype=np.int64), group_size=4, site=0, op=0, algorithm=0)
        if case == "ragged-index-type":
            idx = jnp.zeros((4,), jnp.float32)
            return call("jaccl_ragged_all_to_all", [v, v, idx, idx, idx, idx],
                        [jax.ShapeDtypeStruct(v.shape, v.dtype)], groups=groups, group_size=4, site=0)
        if case == "ragged-entries":
            idx = jnp.zeros((3,), jnp.int32)
            return call("jaccl_ragged_all_to_all", [v, v, idx, idx, idx, idx],
                        [jax.ShapeDtypeStruct(v.shape, v.dtype)], groups=groups, group_size=4, site=0)
        if case == "ppermute-pairs":
            return call("jaccl_ppermute", [v], [jax.ShapeDtypeStruct(v.shape, v.dtype)],
                        groups=groups, group_size=4, site=0, perm=np.array([0, 9], np.int64))
        if case == "ppermute-twice":
            return call("jaccl_ppermute", [v], [jax.ShapeDtypeStruct(v.shape, v.dtype)],
                        groups=groups, group_size=4, site=0, perm=np.array([0, 1, 0, 2], np.int64))
        if case == "gather-counts":
            return call("jaccl_all_gather", [v], [jax.ShapeDtypeStruct(v.shape, v.dtype)],
                        groups=groups, group_size=4, site=0, algorithm=0, outer=1)
        if case == "ragged-rows":
            rows, idx = v.reshape(2, 2), jnp.zeros((4,), jnp.int32)
            out = jnp.zeros((4, 1), v.dtype)
            return call("jaccl_ragged_all_to_all", [rows, out, idx, idx, idx, idx],
                        [jax.ShapeDtypeStruct(out.shape, out.dtype)], groups=groups, group_size=4,
                        site=0).reshape(4)
        raise SystemExit("unknown case")

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                              check_vma=False))
    x = jax.device_put(np.ones((16,), np.float32), NamedSharding(mesh, P("x")))
    try:
        f(x).block_until_ready()
        print("NO ERROR")
    except Exception as e:
        print("RAISED", type(e).__name__, " ".join(str(e).split()))
    print("ALIVE")
""")


@pytest.mark.parametrize("case, message", [
    ("element-type", "all_reduce does not move element type"),
    ("no-group", "device 4 is not part of this jaccl world"),
    ("comm-id", "communicator id 3039 is not its table's"),
    ("ragged-index-type", "must be int32 or int64"),
    ("ragged-entries", "a multiple of the group size 4"),
    ("ppermute-pairs", r"pair \(0, 9\) is outside a group of 4"),
    ("ppermute-twice", "rank 0 sends twice"),
    ("gather-counts", "all_gather of 4 -> 4 elements does not split over a group of 4"),
    ("ragged-rows", "rows differ in length"),
])
def test_a_handler_returns_an_error_for_what_the_trace_checks_stop(case, message):
    done = subprocess.run([sys.executable, "-c", CALL, case], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, JACCL_TIMEOUT="10"))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "ALIVE" in done.stdout and "RAISED" in done.stdout, done.stdout + done.stderr[-3000:]
    assert re.search(message, done.stdout), done.stdout
