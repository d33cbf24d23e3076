"""Room in XLA:CPU's thread pool for every device of a step and every launch of the next.

jaxlib before 0.12.1 runs each CPU device's program, and each launch of one, on a single pool of
NPROC threads (the number of cores this process may run on, unless the NPROC environment
variable says otherwise). With asynchronous dispatch the launches of the next step can wait there
for a per-device slot while this step's programs wait in a collective for a device whose program
has no thread left to run on: a deadlock. It is jax's, not jaccl's: on jax 0.10.2 with 2 cores
the README quickstart with `from jax import lax` and 3 or 4 CPU devices in one process hangs in
XLA's rendezvous, no jaccl loaded; with jaccl's ops 2 devices are enough (an op then times out at
JACCL_TIMEOUT naming the device that never arrived). A pool of 2 x devices + 2 threads holds a
whole step and the next step's launches, and nothing hangs (checked: 2 x 3 and 1 x 4, 200 steps).

Contract: make_room(devices) sets NPROC to 2 x devices + 2 where the installed jaxlib has the bug,
`devices` > 1, NPROC is not set already (the user's choice stands; a smaller value an earlier call
set is raised) and the process has fewer cores than that; otherwise it changes nothing. It only
helps before JAX makes its CPU client: jaccl calls it when its engine loads (_ext, with
planned_devices()) and in distributed.initialize() (with the device count it sets). A larger NPROC
also gives XLA's intra-op pool that many threads (more threads than cores). planned_devices() is
the largest CPU device count the environment or an imported jax's config asks for (1 where none
does). Neither imports jax.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys

# The first jaxlib whose CPU client does not deadlock this way (checked: 0.10.2 and 0.11.2 do,
# 0.12.1 does not; docs/xla-collectives.md).
FIXED_IN = (0, 12, 1)
_set_here = []  # the values make_room() set, the last one current


def jaxlib_version() -> tuple:
    """The installed jaxlib's version as numbers (read without importing it)."""
    return tuple(int(part) for part in re.findall(r"\d+", importlib.metadata.version("jaxlib"))[:4])


def threads_for(devices: int) -> int:
    """The pool that holds one step's programs on `devices` devices and the next step's launches."""
    return 2 * devices + 2


def planned_devices() -> int:
    counts = [1]
    for name in ("JACCL_LOCAL_DEVICES", "JAX_NUM_CPU_DEVICES"):
        if os.environ.get(name, "").strip().isdigit():
            counts.append(int(os.environ[name]))
    flags = os.environ.get("XLA_FLAGS", "")
    forced = re.search(r"--xla_force_host_platform_device_count=(\d+)", flags)
    if forced:
        counts.append(int(forced.group(1)))
    jax = sys.modules.get("jax")
    configured = getattr(getattr(jax, "config", None), "jax_num_cpu_devices", None)
    if isinstance(configured, int):
        counts.append(configured)
    return max(counts)


def make_room(devices: int) -> None:
    current = os.environ.get("NPROC", "").strip()
    users = current and not (_set_here and current == _set_here[-1])
    if devices <= 1 or users or jaxlib_version() >= FIXED_IN:
        return
    threads = threads_for(devices)
    if len(os.sched_getaffinity(0)) < threads and (not current or int(current) < threads):
        _set_here.append(str(threads))
        os.environ["NPROC"] = _set_here[-1]
