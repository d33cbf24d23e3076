"""A program of XLA's collectives alone (jax.lax.psum in shard_map, on jaccl's mpiabi library) that
meets a group XLA never made before, after a lost process, under jaccl-run --keep-going and
JAX's recoverability; each step inside multihost_utils.live_devices.

    python xla_new_group.py {back,lost,lost-inside,lost-last,lost-last-live-order,quiet}
                            [--compiled before|after]

The last process kills itself at step 2. Every step sums each device's process index over the
live devices in process order (a group XLA made at the start, then the survivors'), until:
- back (jaccl-run --restarts 1): the three are live again, the process started again among
  them: every process sums over a mesh in the order [last, 0, 1], a group new to XLA on every
  process, and prints `SUM <value>` (3 processes: 0 + 1 + 2 = 3);
- lost, lost-inside, lost-last: the survivors, two steps after the loss, sum over a mesh of
  every device (a mesh over a lost process's devices, in an order XLA has not run) with the
  lost process's devices first, after the first survivor's or last, and print `RAISED <first
  line>` or `SUM <value>`. `--compiled before`: that program was compiled (jit's lower and
  compile) at the start, while every process was live, and first runs after the loss, so that
  only the split of its group can tell; `after` (the default): compiled after the loss;
- lost-last-live-order: as lost-last, the live devices in the order of the survivors' own
  steps (process 0's first), so that the group's live members are a group XLA already made
  after the loss, the lost process's devices in reverse order (with 2 devices per process: a
  group XLA never made before the loss);
- quiet: the survivors run no collective in the step that loses the process, so that their
  first call after the loss is XLA's split of the live devices' group, and two steps later
  print `SUM <value>` over the live devices (0 + 1 = 1).
"""

import os
import signal
import sys
import time

import jax

jax.config.update("jax_enable_recoverability", True)

import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from common import start  # noqa: E402

args, index, count = start("a group new to XLA after a loss", {
    "mode": {"choices": ["back", "lost", "lost-inside", "lost-last", "lost-last-live-order",
                         "quiet"]},
    "--compiled": {"choices": ["before", "after"], "default": "after"}})
started_again = int(os.environ.get("JACCL_RESTART", "0")) > 0
last = count - 1


def program(devices):
    """The jitted sum over a mesh of `devices`, and an input for it: each device's process."""
    mesh = Mesh(np.array(devices), ("x",))
    x = jax.make_array_from_callback((len(devices),), NamedSharding(mesh, P("x")),
                                     lambda i: np.array([float(index)], np.float32))
    f = jax.jit(jax.shard_map(lambda v: jax.lax.psum(v, "x"), mesh=mesh, in_specs=P("x"),
                              out_specs=P("x")))
    return f, x


def total(devices, compiled=None) -> float:
    f, x = program(devices)
    return float(np.asarray((compiled or f)(x).addressable_data(0))[0])


def by_process(devices, first):
    return sorted(devices, key=lambda d: (d.process_index != first, d.process_index))


def lost_at_place(devices):
    """Every device, the last process's where the mode puts it, the others' in an order XLA has
    not seen (process 1's first)."""
    live = by_process([d for d in devices if d.process_index != last],
                      0 if args.mode == "lost-last-live-order" else 1)
    mine = [d for d in devices if d.process_index == last]
    if args.mode == "lost-last-live-order":
        mine = mine[::-1]
    place = {"lost": 0, "lost-inside": 1}.get(args.mode, len(live))
    return live[:place] + mine + live[place:]


ahead = None  # the program over every device, compiled while every process is live
if args.mode.startswith("lost") and args.compiled == "before":
    f, x = program(lost_at_place(jax.devices()))
    ahead = f.lower(x).compile()
step, lost_at = 0, None
while step < 60:
    try:
        with multihost_utils.live_devices(jax.devices()) as devices:
            if step == 2 and index == last and not started_again:
                os.kill(os.getpid(), signal.SIGKILL)
            processes = sorted({d.process_index for d in devices})
            if len(processes) < count and lost_at is None:
                lost_at = step
            if args.mode == "back" and len(processes) == count and (started_again or lost_at):
                print(f"SUM {total(by_process(devices, last))}", flush=True)
                break
            if args.mode.startswith("lost") and lost_at is not None and step >= lost_at + 2:
                try:
                    print(f"SUM {total(lost_at_place(jax.devices()), ahead)}", flush=True)
                except Exception as e:  # noqa: BLE001 - what the test reads
                    print(f"RAISED {str(e).splitlines()[0][:400]}", flush=True)
                break
            if args.mode == "quiet" and lost_at is not None and step >= lost_at + 2:
                print(f"SUM {total(by_process(devices, 0))}", flush=True)
                break
            if not (args.mode == "quiet" and step == 2):
                total(by_process(devices, 0))
            time.sleep(0.2)
    except Exception as e:  # noqa: BLE001 - the loss: the step again over the live devices
        print(f"step {step} failed ({type(e).__name__})", flush=True)
        continue
    step += 1
print("DONE", flush=True)
sys.stdout.flush()
