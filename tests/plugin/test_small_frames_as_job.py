"""The transport settings run, not just parsed: a pytest-plugin job of 2 processes x 2 devices
on 2 emulated hosts over jaccl's TCP with the smallest frames (JACCL_FRAME_KB=4), the fewest
frames in flight (JACCL_SLOTS=2), one socket per link (JACCL_TCP_SOCKETS=1) and no busy wait
(JACCL_SPIN_US=0): the collective battery (tests/support/process_battery.py) with a 16-bit type,
whose 128 KiB and 1.2 MB messages span hundreds of frames and sizes that divide by neither the
frame nor frames x lanes, against jax.lax in the same job."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_jaccl as jaccl
from job_layouts import TIMEOUT_S
from process_battery import assert_equal_shards, run_battery

SETTINGS = {"JACCL_FRAME_KB": "4", "JACCL_SLOTS": "2", "JACCL_TCP_SOCKETS": "1",
            "JACCL_SPIN_US": "0", "JACCL_TRANSPORT": "tcp"}


@pytest.mark.jax_processes(2, devices_per_process=2, hosts=2, env=SETTINGS, timeout=TIMEOUT_S,
                           xla_collectives="gloo")
def test_the_battery_with_small_frames_two_slots_and_one_socket(jax_job):
    assert (jax_job.process_count, jax.device_count(), jaccl.init().host_count) == (2, 4, 2)
    settings = jaccl.init().settings
    assert (settings.frame_bytes, settings.slots, settings.tcp_sockets) == (4096, 2, 1)
    checked = []

    def compare(name, got, want, digest=False):
        assert_equal_shards(name, got, want)
        checked.append(name)

    run_battery(compare, hierarchical=True, dtypes=(np.float32, np.int8, jnp.bfloat16))
    assert len(checked) > 60
