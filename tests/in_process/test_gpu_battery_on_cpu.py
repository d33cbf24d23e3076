"""The GPU suite's batteries (tests/support/gpu_collectives.py, gpu_moe.py) run on CPU devices:
the collectives on two devices under test against the references on two others, both batteries
on one (the layout of a machine with one GPU, where a single shard covers the whole mesh
axis). The GPU machine is lent rarely and briefly; this keeps its script from failing for
reasons a CPU could have shown. jax.lax on the devices under test, the battery's second
reference on a GPU, would repeat the first one here (both CPU devices): it is left to the
GPU."""

from __future__ import annotations


import jax
import numpy as np

import gpu_collectives
import gpu_moe


def test_the_gpu_battery_passes_on_cpu_devices():
    cpu = jax.devices("cpu")
    checked = gpu_collectives.check_all(verbose=False, devices=cpu[:2], reference=cpu[2:4],
                                        lax_on_devices=False)
    assert checked > 600


def test_the_gpu_moe_checks_pass_on_one_cpu_device():
    """Float32 on one device, the GPU machine's layout. The battery on several devices, every
    dtype, runs through the CUDA handlers on 4 emulated GPUs in one process and 2 x 2 in two
    (tests/builds/test_cuda_emulated.py); every dtype of the CPU handlers' MoE runs in
    tests/in_process/test_moe.py."""
    cpu = jax.devices("cpu")
    checked = gpu_moe.check_moe(verbose=False, devices=cpu[:1], reference=cpu[2:3],
                                dtypes=(np.float32,))
    assert checked > 15


def test_the_gpu_battery_passes_on_one_cpu_device():
    cpu = jax.devices("cpu")
    checked = gpu_collectives.check_all(verbose=False, devices=cpu[:1], reference=cpu[2:3],
                                        lax_on_devices=False)
    assert checked > 300
