"""Unchanged JAX programs on jaccl (jaccl-run --xla-collectives jaccl): the collectives XLA:CPU
emits itself, from the partitioner (jit with shardings) and from jax.lax in shard_map, run on
jaccl's engine through its MPI shim. The worker (workers/xla_collectives.py) uses jax alone,
checks every result against numpy on every process, and asserts the shim carried them; the
engine's own log lines (JACCL_DEBUG=info) show the calls arrived. A peer that dies mid-job is
a JAX error carrying jaccl's message on the survivor, within the deadline."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from transports import BOTH

WORKER = Path(__file__).parent / "workers" / "xla_collectives.py"


def jaccl_run(*args, timeout=240, env=None):
    cmd = [sys.executable, "-m", "jax_jaccl.launch", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "JACCL_TIMEOUT": "30", **(env or {})})


@pytest.mark.parametrize("processes", [2, 3])
def test_an_unchanged_program_runs_its_collectives_on_jaccl(processes):
    done = jaccl_run("-n", str(processes), "--xla-collectives", "jaccl", "--", sys.executable,
                     str(WORKER), "jaccl", env={"JACCL_DEBUG": "info"})
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    for rank in range(processes):
        assert f"[{rank}] XLA COLLECTIVES jaccl CHECKED 19 ON {processes}" in out, out[-4000:]
    for op in ("all_reduce", "all_gather", "reduce_scatter", "point_to_point"):
        assert f"INFO {op} " in out, f"no engine log line for {op}: {out[-3000:]}"


@BOTH
def test_across_emulated_hosts(tmp_path, transport):
    """4 processes on 2 emulated hosts (loopback, one JACCL_HOST_ID each): XLA's collectives
    take jaccl's network transport (the engine's log names it) between the hosts."""
    hosts = [{"processes": 2, "env": {"JACCL_HOST_ID": f"{tmp_path.name}-host{h}", **transport}}
             for h in range(2)]
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(json.dumps({"hosts": hosts}))
    done = jaccl_run("--hostfile", str(hostfile), "--xla-collectives", "jaccl", "--",
                     sys.executable, str(WORKER), "jaccl", env={"JACCL_DEBUG": "info"})
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    for rank in range(4):
        assert f"[{rank}] XLA COLLECTIVES jaccl CHECKED 19 ON 4" in out, out[-4000:]
    wanted = "ofi" if transport.get("JACCL_TRANSPORT") == "ofi" else "tcp"
    assert re.search(rf"INFO all_reduce .*transports [a-z,]*{wanted}", out), out[-4000:]


def test_gloo_stays_the_default():
    done = jaccl_run("-n", "2", "--", sys.executable, str(WORKER), "gloo")
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert "[1] XLA COLLECTIVES gloo CHECKED 19 ON 2" in done.stdout


DIES = """
import os, sys, numpy as np
import jax_jaccl.distributed
jax_jaccl.distributed.initialize()
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()), ("x",))
f = jax.jit(lambda a: jnp.sum(a, axis=0), out_shardings=NamedSharding(mesh, P()))
v = np.ones((4, 3), np.float32)
x = jax.make_array_from_callback(v.shape, NamedSharding(mesh, P("x")), lambda i: v[i])
print("FIRST", float(f(x)[0]), flush=True)
if jax.process_index() == 1:
    os._exit(17)
try:
    f(x).block_until_ready()
    print("NO ERROR", flush=True)
except Exception as e:
    print("ERROR:", str(e).splitlines()[0][:400], flush=True)
    os._exit(3)
"""


def test_a_dead_peer_is_a_jax_error_with_jaccls_message():
    start = time.monotonic()
    done = jaccl_run("-n", "2", "--xla-collectives", "jaccl", "--grace", "60", "--",
                     sys.executable, "-c", DIES, env={"JACCL_TIMEOUT": "10"})
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-4000:]
    assert "[0] FIRST 4.0" in out and "[1] FIRST 4.0" in out, out[-4000:]
    line = next((l for l in out.splitlines() if l.startswith("[0] ERROR:")), "")
    assert "MPI error" in line and "jaccl" in line and "process 1" in line, out[-4000:]
    assert time.monotonic() - start < 50, "the survivor did not stop within the deadline"


MIXED = """
import numpy as np
import jax_jaccl.distributed
jax_jaccl.distributed.initialize()
import jax
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import jax_jaccl as jaccl
from jax_jaccl import _transparent
assert _transparent.active()
n = jax.process_count()
mesh = Mesh(np.array(jax.devices()), ("x",))
v = np.arange(4 * n * 3, dtype=np.float32).reshape(4 * n, 3)
x = jax.make_array_from_callback(v.shape, NamedSharding(mesh, P("x")), lambda i: v[i])
step = lambda t: jaccl.all_reduce(lax.psum(t, "x") * 2, "x") + lax.pmax(t, "x")
f = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
blocks = v.reshape(n, 4, 3)
want = np.tile(blocks.sum(0) * 2 * n + blocks.max(0), (n, 1))
for _ in range(20):
    out = f(x)
for s in out.addressable_shards:
    np.testing.assert_array_equal(np.asarray(s.data), want[s.index])
print("MIXED OK", flush=True)
"""


def test_jaccl_ops_and_xla_collectives_in_one_program():
    """A lax.psum feeding a jaccl.all_reduce, and a lax.pmax beside them, twenty times over:
    one world carries both, in the order the data gives them."""
    done = jaccl_run("-n", "2", "--xla-collectives", "jaccl", "--", sys.executable, "-c", MIXED)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "[0] MIXED OK" in out and "[1] MIXED OK" in out, out[-4000:]
