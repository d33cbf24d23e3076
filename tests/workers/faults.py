"""Provokes one failure and reports how every rank ended.

Modes: shape, dtype, op, order (ranks disagree), sites (two alike all_reduces written on
different lines, dispatched in opposite orders by the last process and the others: ranks
disagree, never each other's data), ragged-bounds (the last process's
ragged_all_to_all reads past its operand), ragged-sizes (its recv_sizes disagree with what the
others send), kill (the last process SIGKILLs itself while
collectives run), stall (the last process never joins), stall-big (it never joins a 128 MiB
all_reduce whose frames fill its receiving ring: the others' eviction request must pass them),
exception (a Python error after a
collective), stranger (a process outside the job connects to the last process's TCP port and
sends garbage, then a handshake with a wrong secret, while the job runs collectives), raises
(the last process raises an uncaught RuntimeError when the others start their collectives;
raises-early: before it started jaccl, while the others start it), loop
(large all_reduces until one fails; prints LOOPING once they run: the test breaks something
from outside). Each rank
prints `RAISED <seconds> <message>` if its collective failed, or `FINISHED` if it completed."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from common import start

args, index, count = start(__doc__, {"mode": dict(choices=[
    "shape", "dtype", "op", "order", "sites", "kill", "stall", "stall-big", "exception", "normal",
    "stranger", "loop", "ragged-bounds", "ragged-sizes", "raises", "raises-early"])})

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import jax_jaccl as jaccl  # noqa: E402

mesh = jax.make_mesh((len(jax.devices()),), ("x",))
last = count - 1


def program(fn, local_shape, dtype=np.float32, out=P()):
    n = len(jax.devices())
    shape = (n * local_shape[0],) + tuple(local_shape[1:])
    x = jax.make_array_from_callback(shape, NamedSharding(mesh, P("x")),
                                     lambda i: np.ones(shape, dtype)[i])
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("x"), out_specs=out)), x


size = 1000
dtype = np.float32
op = "sum"
if index == last:
    size = 2000 if args.mode == "shape" else size
    dtype = np.int32 if args.mode == "dtype" else dtype
    op = "max" if args.mode == "op" else op

if args.mode == "raises-early" and index == last:
    raise RuntimeError("the last process found bad data")
reduce, x = program(lambda v: jaccl.all_reduce(v, "x", op=op), (size,), dtype)
reduce_again, _ = program(lambda v: jaccl.all_reduce(v, "x", op=op), (size,), dtype)
gather, y = program(lambda v: jaccl.all_gather(v, "x"), (size,), out=P("x"))
big, z = program(lambda v: jaccl.all_reduce(v, "x"),
                 (32_000_000 if args.mode == "stall-big" else 4_000_000,))
for f, a in ((reduce, x), (reduce_again, x), (gather, y), (big, z)):
    f.lower(a).compile()  # compile everywhere first: the timings below measure the collectives
print(f"TRANSPORT {jaccl.init().transport}", flush=True)

if args.mode == "kill" and index == last:
    threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
if args.mode.startswith("stall") and index == last:
    time.sleep(600)

STRANGER = """
import os, socket, struct, sys, time
host, port = sys.argv[1].rsplit(":", 1)
with socket.create_connection((host, int(port)), timeout=10) as s:   # garbage
    s.recv(16)
    s.sendall(os.urandom(100))
    time.sleep(0.2)
with socket.create_connection((host, int(port)), timeout=10) as s:   # a well-formed hello
    s.recv(16)                                                        # with a wrong secret
    # the magic and version of xla_ffi/transport/tcp/handshake.h, then a made-up tag
    s.sendall(struct.pack("<IIIIqqQ", 0x4a43484c, 2, 0, 0, 0, int(sys.argv[2]), 12345))
    print("stranger answered:", s.recv(1), flush=True)
"""

if args.mode == "stranger" and index == 0:
    import subprocess

    victim = jaccl.init().endpoints[last]
    remote_device = [d.id for d in jax.devices() if d.process_index == last][0]
    done = subprocess.run([sys.executable, "-c", STRANGER, victim, str(remote_device)],
                          capture_output=True, text=True, timeout=60)
    print("STRANGER", done.returncode, done.stdout.strip(), done.stderr.strip()[-200:], flush=True)

def ragged_program():
    """Every device sends one row to every device (row s of its output from device s), with
    the last process's arguments spoiled as the mode says."""
    n = len(jax.devices())
    spoil = [k for k, d in enumerate(jax.devices()) if d.process_index == last][-1]
    in_off = np.tile(np.arange(n, dtype=np.int32), (n, 1))
    sizes = np.ones((n, n), np.int32)
    out_off = np.tile(np.arange(n, dtype=np.int32)[:, None], (1, n))
    recv = np.ones((n, n), np.int32)
    if args.mode == "ragged-bounds":
        in_off[spoil, 0] = n + 5
    else:
        recv[spoil, 0] = 2
    put = lambda a: jax.make_array_from_callback(  # noqa: E731
        a.shape, NamedSharding(mesh, P("x")), lambda i: a[i])
    f = jax.jit(jax.shard_map(lambda *a: jaccl.ragged_all_to_all(*a, axis_name="x"), mesh=mesh,
                              in_specs=(P("x"),) * 6, out_specs=P("x")))
    return lambda: f(put(np.ones((n * n, 2), np.float32)), put(np.zeros((n * (n + 1), 2), np.float32)),
                     *(put(v.reshape(-1)) for v in (in_off, sizes, out_off, recv)))


ragged = ragged_program() if args.mode.startswith("ragged") else None
start_time = time.monotonic()
if args.mode == "raises" and index == last:
    raise RuntimeError("the last process found bad data")
try:
    if ragged is not None:
        ragged().block_until_ready()
    elif args.mode == "order" and index == last:
        gather(y).block_until_ready()
        reduce(x).block_until_ready()
    elif args.mode == "sites":
        first, second = (reduce_again, reduce) if index == last else (reduce, reduce_again)
        results = [first(x), second(x)]  # both dispatched before either is awaited
        for r in results:
            r.block_until_ready()
    elif args.mode == "stall-big":
        big(z).block_until_ready()
    elif args.mode in ("kill", "loop"):
        for i in range(10_000):
            big(z).block_until_ready()
            if i == 0:
                print("LOOPING", flush=True)
                start_time = time.monotonic()
    elif args.mode == "stranger":
        for _ in range(20):
            assert np.all(np.asarray(reduce(x).addressable_shards[0].data) == len(jax.devices()))
    else:
        reduce(x).block_until_ready()
        gather(y).block_until_ready()
except Exception as e:  # noqa: BLE001
    message = " ".join(str(e).split())
    print(f"RAISED {time.monotonic() - start_time:.2f} {message}", flush=True)
    sys.exit(3)
print("FINISHED", flush=True)
if args.mode == "exception":
    raise RuntimeError("failure in user code after a collective")
