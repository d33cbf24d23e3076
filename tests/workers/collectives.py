"""Runs the collective battery (tests/support/process_battery.py) across processes. Prints
`WORLD` and `TRANSPORT`, `OK name` per check, `DIGEST name device hash` for results that must
be bitwise equal on every device, and `DONE` at the end. JACCL_TEST_BATTERY_DTYPES=transport:
the battery's transport types only (a layout there for its paths, not its dtypes)."""

from __future__ import annotations

import hashlib
import os
import sys

from common import start

args, index, count = start(__doc__)

import jax  # noqa: E402

import jax_jaccl as jaccl  # noqa: E402
from process_battery import ALL_DTYPES, TRANSPORT_DTYPES, assert_equal_shards, run_battery  # noqa: E402

hosts = int(os.environ.get("JACCL_TEST_FAKE_HOSTS", "0"))  # hosts the launcher emulates
print(f"WORLD {jaccl.init().host_count} hosts", flush=True)
print(f"TRANSPORT {jaccl.init().transport}", flush=True)


def compare(name, got, want, digest=False):
    for dev, result in assert_equal_shards(name, got, want).items():
        if digest:
            print(f"DIGEST {name} {dev} {hashlib.sha1(result.tobytes()).hexdigest()}", flush=True)
    print(f"OK {name}", flush=True)


transport_only = os.environ.get("JACCL_TEST_BATTERY_DTYPES", "") == "transport"
run_battery(compare, hierarchical=hosts > 1 and jax.device_count() // hosts > 1,
            dtypes=TRANSPORT_DTYPES if transport_only else ALL_DTYPES)
print("DONE", flush=True)
sys.stdout.flush()
