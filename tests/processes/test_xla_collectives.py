"""XLA's collectives on jaccl (jaccl-run's default with one CPU device per process): the
collectives XLA:CPU emits itself, from the partitioner (jit with shardings) and from jax.lax in
shard_map, run on jaccl's engine through its mpiabi library. The worker (workers/xla_collectives.py)
uses jax alone, checks every result against numpy on every process, and asserts the mpiabi library
carried them; the engine's own log lines (JACCL_DEBUG=info) show the calls arrived. A program
that never starts jaccl (jax.distributed.initialize() alone) gets the engine at its first
collective. A peer that dies, stalls or disagrees (also by taking a jaccl op where the others
take an XLA collective) is a JAX error carrying jaccl's message on every survivor, within the
deadline. Several CPU devices per process run on jaccl when asked (`--xla-collectives jaccl`),
including programs that mix meshes XLA's caching defeats the mpiabi library on (a clear error on
every process, not wrong data). `--xla-collectives gloo`, and a program that asks for more devices
than its launcher planned, keep JAX's own. Every process shutting jaccl down and starting it
again runs both kinds of collective again."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

import harness
from transports import BOTH

WORKER = Path(__file__).parents[1] / "workers" / "xla_collectives.py"


def jaccl_run(*args, timeout=240, env=None):
    return harness.jaccl_run(*args, timeout=timeout, env={"JACCL_TIMEOUT": "30", **(env or {})})


@pytest.mark.parametrize("processes, flag", [(2, []), (3, ["--xla-collectives", "jaccl"])],
                         ids=["2-by-default", "3-when-asked"])
def test_an_unchanged_program_runs_its_collectives_on_jaccl(processes, flag):
    done = jaccl_run("-n", str(processes), *flag, "--", sys.executable, str(WORKER), "jaccl",
                     env={"JACCL_DEBUG": "info"})
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    for rank in range(processes):
        assert f"[{rank}] XLA COLLECTIVES jaccl CHECKED 23 ON {processes} x 1" in out, out[-4000:]
    for op in ("all_reduce", "all_gather", "reduce_scatter", "point_to_point"):
        assert re.search(rf"INFO {op} .* of communicator [0-9a-f]+ \(XLA's collectives\)", out), \
            f"no engine log line for {op} from XLA: {out[-3000:]}"


@pytest.mark.parametrize("processes, order", [(2, "by_process"), (4, "twisted")])
def test_several_devices_per_process_when_asked(processes, order):
    """2 CPU devices per process (XLA's stock MPI path cannot: openxla/xla#7849): the 1-D
    battery, then a 2-D mesh (processes x devices) whose groups lie inside processes, across
    them, and all of them in turn; "twisted" pairs a process's devices with another's in reverse
    order, so the mpiabi library's choice of which jaccl device stands for which XLA device differs
    from group to group, and a process's two devices share jaccl devices in different communicators
    at the same moment (the world shares its channels: transport/shared_channel.h)."""
    done = jaccl_run("-n", str(processes), "--devices-per-process", "2", "--xla-collectives",
                     "jaccl", "--", sys.executable, str(WORKER), "jaccl", order,
                     env={"JACCL_DEBUG": "info"})
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    for rank in range(processes):
        assert f"[{rank}] XLA COLLECTIVES jaccl CHECKED 27 ON {processes} x 2" in out, out[-4000:]
    assert re.search(r"INFO all_reduce .* of communicator [0-9a-f]+ \(XLA's collectives\): "
                     r"algorithm \w+, transports [a-z,]*local", out), out[-3000:]


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
        assert f"[{rank}] XLA COLLECTIVES jaccl CHECKED 23 ON 4 x 1" in out, out[-4000:]
    wanted = "ofi" if transport.get("JACCL_TRANSPORT") == "ofi" else "tcp"
    assert re.search(rf"INFO all_reduce .*transports [a-z,]*{wanted}", out), out[-4000:]


def test_gloo_when_asked():
    done = jaccl_run("-n", "2", "--xla-collectives", "gloo", "--", sys.executable, str(WORKER), "gloo")
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert "[1] XLA COLLECTIVES gloo CHECKED 23 ON 2 x 1" in done.stdout


# jax alone: jax.distributed.initialize() from jaccl-run's variables, or with no arguments
# (jaccl-run's cluster environment, jax_jaccl/_cluster.py, finds them); the program imports
# nothing of jaccl's (only the start-up hook's small modules are loaded, no engine); a psum of
# 2^32 + 5 elements a device is refused as it compiles (_mpi_counts.py: XLA would wrap its count).
NEVER_STARTS_JACCL = """
import os, sys, numpy as np
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
jax.distributed.initialize(%s)
assert jax.process_count() == 2 and jax.local_device_count() == %d
mesh = Mesh(np.array(jax.devices()), ("x",))
v = np.arange(12 * %d, dtype=np.float32).reshape(4 * %d, 3)
x = jax.make_array_from_callback(v.shape, NamedSharding(mesh, P("x")), lambda i: v[i])
assert {m for m in sys.modules if m.startswith("jax_jaccl")} <= {
    "jax_jaccl", "jax_jaccl._cluster", "jax_jaccl._settings", "jax_jaccl._compat",
    "jax_jaccl._mpi_counts", "jax_jaccl._xla_groups"}
psum = jax.jit(jax.shard_map(lambda a: jax.lax.psum(a, "x"), mesh=mesh, in_specs=P("x"),
                             out_specs=P("x")))
big = jax.ShapeDtypeStruct((len(jax.devices()) * ((1 << 32) + 5),), jnp.int8,
                           sharding=NamedSharding(mesh, P("x")))
try:
    psum.lower(big).compile()
    raise AssertionError("a psum of 2^32 + 5 elements a device compiled for XLA's MPI path")
except ValueError as e:  # as it compiles: XLA would hand the mpiabi library a count of 5
    assert "all-reduce" in str(e) and "moves 4294967301 elements" in str(e), e
f = jax.jit(lambda a: jnp.sum(a, axis=0), out_shardings=NamedSharding(mesh, P()))
for _ in range(3):
    out = f(x)
np.testing.assert_array_equal(np.asarray(out.addressable_shards[0].data), v.sum(0))
from jax_jaccl import _bootstrap
assert _bootstrap.is_initialized(), "the mpiabi library did not start jaccl's engine"
print("SUMMED ON JACCL", flush=True)
"""


EXPLICIT = ('os.environ["JACCL_COORDINATOR"], int(os.environ["JACCL_NUM_PROCESSES"]), '
            'int(os.environ["JACCL_PROCESS_ID"])')


@pytest.mark.parametrize("arguments, devices", [(EXPLICIT, 1), ("", 1), ("", 2)],
                         ids=["jaccl-runs-variables", "no-arguments", "no-arguments-2-devices"])
def test_a_program_that_never_starts_jaccl_gets_it_at_its_first_collective(arguments, devices):
    flags = ["--devices-per-process", "2", "--xla-collectives", "jaccl"] if devices == 2 else []
    program = NEVER_STARTS_JACCL % (arguments, devices, devices, devices)
    done = jaccl_run("-n", "2", *flags, "--", sys.executable, "-c", program,
                     env={"JACCL_DEBUG": "info"})
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    for rank in (0, 1):
        assert f"[{rank}] SUMMED ON JACCL" in out, out[-4000:]
    assert "XLA's first collective started jaccl's engine" in out, out[-4000:]
    assert "INFO all_reduce 12 B" in out, out[-4000:]


SEVERAL_DEVICES = """
import warnings, numpy as np
import jax_jaccl.distributed
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    jax_jaccl.distributed.initialize(local_devices=2)
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jax_jaccl import _xla_collectives
assert jax.config.jax_cpu_collectives_implementation == "gloo"
print("WARNED", " | ".join(str(w.message) for w in seen), flush=True)
mesh = Mesh(np.array(jax.devices()), ("x",))
v = np.arange(24, dtype=np.float32).reshape(8, 3)
x = jax.make_array_from_callback(v.shape, NamedSharding(mesh, P("x")), lambda i: v[i])
out = jax.jit(lambda a: jnp.sum(a, axis=0), out_shardings=NamedSharding(mesh, P()))(x)
np.testing.assert_array_equal(np.asarray(out.addressable_shards[0].data), v.sum(0))
print("SUMMED ON GLOO", flush=True)
"""


def test_a_program_with_more_devices_than_its_launcher_planned_keeps_gloo_and_says_so():
    """jaccl-run chose jaccl for 1 device per process; the program asks for 2 itself."""
    done = jaccl_run("-n", "2", "--", sys.executable, "-c", SEVERAL_DEVICES)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    for rank in (0, 1):
        assert f"[{rank}] SUMMED ON GLOO" in out, out[-4000:]
        assert re.search(rf"\[{rank}\] WARNED jaccl: XLA's own collectives stay on JAX's gloo: this "
                         r"process asks for 2 CPU devices, its launcher planned 1", out), out[-4000:]


FAULT_TIMEOUT = 5


def raised(out: str, rank: int) -> tuple[float, str]:
    """(seconds, message) of the rank's `RAISED <seconds> <message>` line (workers/
    xla_faults.py); the test fails if the rank printed none."""
    line = next((l for l in out.splitlines() if l.startswith(f"[{rank}] RAISED ")), None)
    assert line is not None, out[-4000:]
    seconds, message = line.split(" ", 3)[2:]
    return float(seconds), message


@pytest.mark.parametrize("mode", ["stall", "disagree", "order"])
def test_a_stalled_or_disagreeing_peer_is_a_jax_error_on_every_survivor(mode):
    """order: a jaccl op and an XLA collective of the same shape taken in different orders on
    different ranks must be "ranks disagree" too (their calls are numbered apart), not a swap
    of their data."""
    done = jaccl_run("-n", "2", "--grace", str(FAULT_TIMEOUT + 10), "--", sys.executable,
                     str(WORKER.parent / "xla_faults.py"), mode, env={"JACCL_TIMEOUT": str(FAULT_TIMEOUT)},
                     timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-4000:]
    survivors = (0,) if mode == "stall" else (0, 1)
    for rank in survivors:
        seconds, message = raised(out, rank)
        # order: the jaccl op raises on some ranks (an FFI error), XLA's collective on others
        assert "MPI error: jaccl" in message or mode == "order" and "jaccl: " in message, message
        if mode == "stall":
            assert FAULT_TIMEOUT - 0.5 < seconds < FAULT_TIMEOUT + 3, message
            assert re.search(r"timed out|waited", message) and "process 1" in message, message
        else:
            assert seconds < FAULT_TIMEOUT + 3, message
            assert "ranks disagree" in message, message
    assert "FINISHED" not in out, out[-4000:]


def test_meshes_that_defeat_mpiabi_are_an_error_on_every_process():
    """With several devices per process XLA caches communicators per process; two meshes that
    order a process's devices differently make a group new on some processes only (workers/
    xla_faults.py "meshes"). Every process must get the mpiabi library's explanation, none a
    result."""
    done = jaccl_run("-n", "2", "--devices-per-process", "2", "--xla-collectives", "jaccl",
                     "--grace", str(FAULT_TIMEOUT + 10), "--", sys.executable,
                     str(WORKER.parent / "xla_faults.py"), "meshes",
                     env={"JACCL_TIMEOUT": str(FAULT_TIMEOUT)}, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-4000:]
    for rank in (0, 1):
        message = raised(out, rank)[1]
        assert "made communicators for different collectives at once" in message, out[-4000:]
        assert "--xla-collectives gloo" in message, message
    assert "FINISHED" not in out, out[-4000:]


def test_groups_cached_on_some_processes_only_end_in_an_error_naming_the_split():
    """One device per process (jaccl-run's default: XLA's collectives on jaccl): a psum whose
    groups XLA has cached on processes 1 and 3 but not on 0 and 2 (workers/xla_faults.py
    "groups") leaves 1 and 3 out of the split 0 and 2 make: those two must raise within the
    deadline saying it was the split and what to do (real MPI would hang there)."""
    done = jaccl_run("-n", "4", "--grace", str(FAULT_TIMEOUT + 10), "--", sys.executable,
                     str(WORKER.parent / "xla_faults.py"), "groups",
                     env={"JACCL_TIMEOUT": str(FAULT_TIMEOUT)}, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-4000:]
    for rank in (0, 2):
        seconds, message = raised(out, rank)
        assert FAULT_TIMEOUT - 0.5 < seconds < FAULT_TIMEOUT + 3, out[-4000:]
        assert "MPI_Comm_split (XLA making the communicator of its group of devices led by " \
            "device" in message and "--xla-collectives gloo" in message, message
        assert re.search(r"never reached this call", message), message


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
assert jax.process_count() == 2
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
    done = jaccl_run("-n", "2", "--grace", "60", "--", sys.executable, "-c", DIES,
                     env={"JACCL_TIMEOUT": "10"})
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
from jax_jaccl import _xla_collectives
assert _xla_collectives.active() and jax.process_count() == 2
n = jax.device_count()
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


@pytest.mark.parametrize("devices", [1, 2])
def test_jaccl_ops_and_xla_collectives_in_one_program(devices):
    """A lax.psum feeding a jaccl.all_reduce, and a lax.pmax beside them, twenty times over:
    one world carries both, in the order the data gives them (with 2 devices per process, over
    shared channels). The psum, in a shard_map with a jaccl op, is jaccl's all_reduce itself
    (docs/semantics.md, Autodiff); the pmax is XLA's, through the mpiabi library."""
    done = jaccl_run("-n", "2", "--devices-per-process", str(devices), "--xla-collectives",
                     "jaccl", "--", sys.executable, "-c", MIXED)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "[0] MIXED OK" in out and "[1] MIXED OK" in out, out[-4000:]


SHUTDOWN_AND_AGAIN = """
import jax_jaccl.distributed
jax_jaccl.distributed.initialize()
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
import jax_jaccl as jaccl
n = jax.device_count()
mesh = jax.make_mesh((n,), ("x",))
x = jax.make_array_from_callback((n,), NamedSharding(mesh, P("x")),
                                 lambda i: np.arange(n, dtype=np.float32)[i])
def both(v):  # XLA's psum through the mpiabi library, then jaccl's own all_reduce
    return jaccl.all_reduce(jax.lax.psum(v, "x") * (1 + jax.lax.axis_index("x")), "x")
program = lambda: jax.jit(jax.shard_map(both, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
first = np.asarray(program()(x).addressable_data(0)).tolist()
jaccl.shutdown()
jaccl.init()
again = np.asarray(program()(x + 1).addressable_data(0)).tolist()
total = n * (n - 1) / 2
assert first == [total * n * (n + 1) / 2] and again == [(total + n) * n * (n + 1) / 2], (first, again)
print("AGAIN OK", first, again, flush=True)
"""


@pytest.mark.parametrize("devices", [1, 2])
def test_every_process_shuts_jaccl_down_and_starts_it_again(devices):
    """jaccl.shutdown() then jaccl.init() in every process of a job: the new world meets in a
    key-value space of its own (the first one's keys are still there), the mpiabi library keeps its
    communicators (the same world), and both XLA's collectives and jaccl's run again."""
    done = jaccl_run("-n", "2", "--devices-per-process", str(devices), "--xla-collectives",
                     "jaccl", "--", sys.executable, "-c", SHUTDOWN_AND_AGAIN)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "[0] AGAIN OK" in out and "[1] AGAIN OK" in out, out[-4000:]
