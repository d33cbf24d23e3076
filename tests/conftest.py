"""Test set-up shared by every suite: this pytest process gets 4 CPU devices (one process x 4
devices layout); multi-process suites start their own processes. A process of a
jax_processes job (tests/plugin) keeps the devices its job gave it."""

import os

os.environ.setdefault("JACCL_TIMEOUT", "60")

import jax  # noqa: E402

if not os.environ.get("JACCL_PYTEST_JOB_DIR"):
    jax.config.update("jax_num_cpu_devices", 4)
