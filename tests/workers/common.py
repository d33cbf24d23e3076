"""Start-up shared by the workers: parse --marker (lets the test find leftover processes),
initialise jax.distributed from jaccl-run's environment, and check the job really has more
than one process. With JACCL_TEST_EMULATED_CUDA=<module> the process's devices then act as
GPUs through jaccl's CUDA handlers built over emulated GPUs (tests/builds/cuda_emulation). With
JACCL_TEST_ENGINE=<path of a _jaccl module> that module, built another way (tests/builds/
test_toolchains.py), is the engine instead of the installed one. JACCL_TEST_LAST_PROCESS_ENV=
"K=V,..." sets variables in the last process only (settings that disagree)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys


def use_engine(path: str) -> None:
    """Makes `path` the jax_jaccl._jaccl that the package imports; call before importing it,
    after jax (the order of a user's program: jaxlib's libstdc++ is loaded first)."""
    spec = importlib.util.spec_from_file_location("jax_jaccl._jaccl", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["jax_jaccl._jaccl"] = module
    print(f"ENGINE {module.__file__}", flush=True)


import jax  # noqa: E402,F401

if os.environ.get("JACCL_TEST_ENGINE"):
    use_engine(os.environ["JACCL_TEST_ENGINE"])

import jax_jaccl.distributed  # noqa: E402


def place_on_emulated_host() -> None:
    """With JACCL_TEST_FAKE_HOSTS=N, this process sits on emulated host (its index mod N): it
    talks to the other hosts' processes over loopback, through the transport between hosts."""
    fake_hosts = int(os.environ.get("JACCL_TEST_FAKE_HOSTS", "0"))
    if fake_hosts:
        os.environ["JACCL_HOST_ID"] = f"fake-host-{int(os.environ['JACCL_PROCESS_ID']) % fake_hosts}"


def start(description: str, extra=None):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--marker", default="")
    for name, kwargs in (extra or {}).items():
        parser.add_argument(name, **kwargs)
    args = parser.parse_args()
    last_env = os.environ.get("JACCL_TEST_LAST_PROCESS_ENV")  # "K=V,K=V": the last process differs
    if last_env and int(os.environ["JACCL_PROCESS_ID"]) == int(os.environ["JACCL_NUM_PROCESSES"]) - 1:
        os.environ.update(item.split("=", 1) for item in last_env.split(","))
    place_on_emulated_host()
    index, count = jax_jaccl.distributed.initialize()
    assert count > 1, "multi-process worker started with a single process"
    emulated = os.environ.get("JACCL_TEST_EMULATED_CUDA")
    if emulated:  # this process's devices become emulated GPUs (tests/builds/cuda_emulation)
        from emulated_gpus import install

        install(emulated, os.environ.get("JACCL_CUDA_PATH", "peer"))
    print(f"STARTED {index} {count}", flush=True)
    return args, index, count
