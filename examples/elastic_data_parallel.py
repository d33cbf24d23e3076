"""Data-parallel training that goes on without a lost process, run with jaccl-run --keep-going.

    jaccl-run -n 3 --keep-going --xla-collectives gloo -- \
        python examples/elastic_data_parallel.py --kill-at 6

A linear model learns from a global batch that every step splits over the live devices; the
gradients are summed with jax_jaccl.lax.psum. Each step runs inside JAX's
`multihost_utils.live_devices(...)` (JAX's fault-tolerance pattern; recoverability is switched
on before jax.distributed starts), over a mesh of the devices it reports live. With
`--kill-at K` the last process kills itself (SIGKILL) at step K (`--kill-at K1,K2`: then the
one before it at K2, and so on; `--who P1,P2` names other processes): the survivors' step fails
(jaccl names the dead process), live_devices reports the survivors once JAX's coordination
service counts the process gone (at once when jaccl-run runs the service, as with --keep-going
on one machine; else after JACCL_HEARTBEAT_TIMEOUT seconds without its heartbeat), and the
step is retried over them: jaccl builds a new world over the survivors as the retried step is
traced. Each survivor prints how long after the last step that completed the retried one
ran, and at the end a digest of the parameters.

With `--stall`, the processes of `--kill-at` stall instead (sleep for good, alive to JAX's
heartbeat): the others' collective times out after JACCL_TIMEOUT seconds naming the process
that never reached it, which is then killed (by them on its host, by itself at their request
from another: JACCL_EVICT_STALLED=1, which jaccl-run --keep-going sets), so the job goes on as
after a loss.

`--jax-lax` sums the gradients with jax.lax.psum instead (and gathers the state of `--rejoin`
with jax.lax.all_gather), XLA's own collectives, which jaccl-run carries on jaccl's engine by
default (one CPU device per process; with several, when asked: --xla-collectives jaccl): the
survivors go on the same way, jaccl building their world when XLA makes its communicator for
their devices, and a process that comes back rejoins them when XLA first runs a collective
over all of them.

`--state-out PATH` writes the state the survivors went on from (the step and the parameters
before it); `--resume PATH` starts a job there: a job of the survivors' size resumed from it
ends with the same digest (the same sums in the same order).

With `--rejoin`, a lost process that `jaccl-run --restarts` starts again (JACCL_RESTART in its
environment counts its earlier starts; it kills no one) comes back: whenever the processes of
a step are not those of the last step that completed (a loss, a return, a process's first
step), the step first shares the state: every device's (step, parameters) gathered over the
mesh with jax_jaccl.lax.all_gather, and every process goes on from the furthest step's, the
survivors', bit for bit. The returning process then trains on with them: jaccl builds a world
that includes it as the step is traced again over the mesh of all of them. One that finds no
other process live (they finished before it was back) ends: there is nothing to rejoin.
`--pace` makes each step last long enough for it to come back:

    jaccl-run -n 3 --keep-going --restarts 1 --xla-collectives gloo -- \
        python examples/elastic_data_parallel.py --steps 24 --pace 0.25 --kill-at 4 --rejoin
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import sys
import time

import jax

jax.config.update("jax_enable_recoverability", True)  # before jax.distributed starts

import jax_jaccl.distributed  # noqa: E402

process_index, process_count = jax_jaccl.distributed.initialize()

import numpy as np  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from jax_jaccl import lax  # noqa: E402

AXIS = "data"
BATCH = 24  # rows of the global batch: divides over 1, 2, 3 and 4 devices
FEATURES = 16
LR = 0.05
RETRIES = 3  # tries of one step before giving up


def global_batch(step: int):
    """The step's whole batch, the same on every process: rows are dealt over the devices."""
    rng = np.random.default_rng(step)
    x = rng.normal(size=(BATCH, FEATURES)).astype(np.float32)
    truth = np.linspace(-1, 1, FEATURES, dtype=np.float32)
    return x, (x @ truth + 0.1 * rng.normal(size=BATCH)).astype(np.float32)


def train_step(mesh, psum=lax.psum):
    def local(w, x, y):
        grad = jax.grad(lambda w: jnp.sum((x @ w - y) ** 2))(w)
        return w - LR * psum(grad, AXIS) / BATCH
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P(AXIS), P(AXIS)), out_specs=P()))


def on_mesh(mesh, array, spec):
    return jax.make_array_from_callback(array.shape, NamedSharding(mesh, spec), lambda i: array[i])


def shared_state(mesh, step: int, w, all_gather=lax.all_gather):
    """The state to go on from: every device's (step, w) gathered over the mesh, the furthest
    step's taken (the survivors hold the same bits; a process started again holds step 0)."""
    mine = np.concatenate([w, [np.float32(step)]])[None]  # steps < 2**24: exact in float32
    n = mesh.devices.size
    states = jax.make_array_from_callback((n, FEATURES + 1), NamedSharding(mesh, P(AXIS)),
                                          lambda i: mine)
    gather = jax.jit(jax.shard_map(lambda s: all_gather(s, AXIS, tiled=True)[None], mesh=mesh,
                                   in_specs=P(AXIS), out_specs=P(AXIS)))
    every = np.asarray(gather(states).addressable_data(0))[0]  # every device's, as this one got them
    furthest = every[int(np.argmax(every[:, -1]))]
    return int(furthest[-1]), furthest[:-1].copy()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12, help="steps to train (default 12)")
    parser.add_argument("--kill-at", default="",
                        help="steps at which a process kills itself, comma-separated: the last "
                             "process at the first, the one before it at the second... "
                             "(default: none)")
    parser.add_argument("--who", default="",
                        help="which processes die at those steps (jax.process_index(), comma-"
                             "separated; default: the last, then the one before it...)")
    parser.add_argument("--stall", action="store_true",
                        help="the processes of --kill-at stall (sleep) there instead of dying")
    parser.add_argument("--state-out", default=None,
                        help="where to write the state the survivors go on from (.npz)")
    parser.add_argument("--resume", default=None, help="start from a state --state-out wrote")
    parser.add_argument("--jax-lax", action="store_true",
                        help="sum the gradients with jax.lax.psum, XLA's own collective (which "
                             "jaccl-run carries on jaccl's engine by default), not "
                             "jax_jaccl.lax.psum")
    parser.add_argument("--pace", type=float, default=0.0,
                        help="seconds each step lasts at least (a stand-in for a real model's "
                             "compute; default 0)")
    parser.add_argument("--rejoin", action="store_true",
                        help="a lost process comes back (under jaccl-run --restarts) and gets "
                             "the survivors' state; only a process's first start kills itself")
    args = parser.parse_args()
    restarted = int(os.environ.get("JACCL_RESTART", "0")) > 0
    if restarted and not args.rejoin:
        parser.error("this process was started again (JACCL_RESTART): pass --rejoin")

    kill_steps = [int(k) for k in args.kill_at.split(",") if k]
    who = [int(p) for p in args.who.split(",") if p] or \
        [process_count - 1 - i for i in range(len(kill_steps))]
    if len(who) != len(kill_steps):
        parser.error("--who names one process per step of --kill-at")
    kills = dict(zip(kill_steps, who))  # step -> who dies
    step, w = 0, np.zeros(FEATURES, np.float32)
    if args.resume:
        state = np.load(args.resume)
        step, w = int(state["step"]), state["w"]
    compiled = {}  # the step, compiled once per set of live devices
    tries, failed, last_good, last_processes = 0, False, time.monotonic(), None
    while step < args.steps:
        try:
            with multihost_utils.live_devices(jax.devices()) as devices:
                if not any(d.process_index == process_index for d in devices):
                    sys.exit("JAX's coordination service no longer counts this process live "
                             "(its heartbeats came later than JACCL_HEARTBEAT_TIMEOUT allows: "
                             "a stalled machine?)")
                if kills.get(step) == process_index and not restarted:
                    if args.stall:
                        print(f"stalling at step {step}", flush=True)
                        time.sleep(24 * 3600)
                    os.kill(os.getpid(), signal.SIGKILL)
                mesh = Mesh(np.array(devices), (AXIS,))
                processes = sorted({d.process_index for d in devices})
                if restarted and last_processes is None and processes == [process_index]:
                    print("nothing to rejoin: the other processes finished or were lost",
                          flush=True)
                    return
                if args.rejoin and (failed or processes != last_processes):
                    compiled.clear()  # a program of an earlier world may name the same devices
                    was = step
                    step, w = shared_state(mesh, step, w,
                                           jax.lax.all_gather if args.jax_lax else lax.all_gather)
                    if last_processes is None and step != was:
                        print(f"rejoined at step {step} with processes {processes}", flush=True)
                    elif last_processes is not None and set(processes) - set(last_processes):
                        print(f"step {step}: processes {sorted(set(processes) - set(last_processes))} "
                              "rejoined", flush=True)
                key = tuple(d.id for d in devices)
                if key not in compiled:
                    compiled[key] = train_step(mesh, jax.lax.psum if args.jax_lax else lax.psum)
                x, y = global_batch(step)
                out = compiled[key](on_mesh(mesh, w, P()), on_mesh(mesh, x, P(AXIS)),
                                    on_mesh(mesh, y, P(AXIS)))
                w_next = np.asarray(out.addressable_data(0))
        except Exception as e:  # noqa: BLE001 - a lost process: retry the step over the survivors
            tries += 1
            if tries > RETRIES:
                raise
            failed = True
            print(f"step {step} failed ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                  "retrying over the live devices", flush=True)
            continue
        if failed:  # the loss, JAX's verdict on it, the new world and the step's compilation
            print(f"step {step} ran on {len(devices)} devices, "
                  f"{time.monotonic() - last_good:.1f} s after the last step that completed",
                  flush=True)
            if args.state_out and process_index == min(d.process_index for d in devices):
                np.savez(args.state_out, step=step, w=w)
            failed = False
        time.sleep(max(0.0, args.pace - (time.monotonic() - last_good)))
        loss = float(np.mean((x @ w_next - y) ** 2))  # the step's batch, on the host
        print(f"step {step}: loss {loss:.6f} on {len(devices)} devices", flush=True)
        step, w, tries, last_good, last_processes = step + 1, w_next, 0, time.monotonic(), processes
    print(f"FINAL {hashlib.sha1(w.tobytes()).hexdigest()}", flush=True)


if __name__ == "__main__":
    main()
