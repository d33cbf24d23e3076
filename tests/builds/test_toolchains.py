"""The engine built the way the GPU machine's default compiler builds a user's extension:
libstdc++ linked into the module (-static-libstdc++) and its symbols bound inside it
(-Wl,-Bsymbolic). Such a module carries its own copy of libstdc++'s stream code, but its locale
facet ids are STB_GNU_UNIQUE symbols that the dynamic linker binds to the copy loaded first
(jaxlib's libstdc++, when jax is imported first, as here): while the engine formatted text with
std::ostream, every number it wrote vanished (JACCL_DEBUG=INFO lines ended after their first
word here) or crashed the process (on the H200 run of 2026-11-30, docs/gpus.md), errors
included. Built that way here, in real multi-process jobs, the INFO lines and the errors of
failing jobs come out whole.

It is also built with XLA's FFI headers of the oldest supported jax (pyproject.toml's build
requirement, what `pip install` builds with), so the same jobs show that such a module serves
the newest jax: XLA accepts handlers of an older FFI API, never of a newer one.

The CUDA module gets the same link in tests/builds/cuda_emulation/build.py (the emulated-GPU tests)."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

from module_symbols import exported
from util import load_cuda_emulation_build, pip_build_jax

REPO = pathlib.Path(__file__).resolve().parents[2]
from harness import clean, run_job  # noqa: E402

GPU_MACHINE_LINK = " ".join(load_cuda_emulation_build().GPU_MACHINE_LINK)
TIMEOUT = 6
BATTERY_CHECKS = 514  # every check of tests/workers/collectives.py at 2 x 2


def oldest_ffi_headers() -> pathlib.Path:
    """XLA's FFI headers of the jax pip builds with (its jaxlib wheel's include/xla/ffi, from
    PyPI once, kept under build/): the include directory to build with."""
    version = pip_build_jax()
    cache = REPO / "build" / f"ffi-headers-jaxlib-{version}"
    include = cache / "jaxlib" / "include"
    if not (include / "xla" / "ffi" / "api" / "c_api.h").exists():
        wheels = cache / "wheel"
        done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                               "--only-binary=:all:", "-d", str(wheels), f"jaxlib=={version}"],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        (wheel,) = wheels.glob("jaxlib-*.whl")
        with zipfile.ZipFile(wheel) as z:
            z.extractall(cache, [n for n in z.namelist() if n.startswith("jaxlib/include/xla/ffi/")])
        wheel.unlink()
    return include


def build_engine(out: pathlib.Path, link_flags: str, ffi_include: pathlib.Path) -> pathlib.Path:
    """Configures and builds _jaccl alone in `out` with these module link flags and XLA FFI
    headers, without CUDA and without libfabric (so CI also builds the engine as a machine
    without libfabric does)."""
    env = dict(os.environ, PATH=os.pathsep.join([sysconfig.get_path("scripts"), os.environ["PATH"]]))
    cmake = shutil.which("cmake", path=env["PATH"])
    assert cmake, "cmake is needed (make setup installs it)"
    generator = ["-G", "Ninja"] if shutil.which("ninja", path=env["PATH"]) else []
    for step in ([cmake, "-S", str(REPO), "-B", str(out), *generator, "-DJACCL_CUDA=OFF", "-DJACCL_OFI=OFF",
                  "-DCMAKE_BUILD_TYPE=Release", f"-DPython_EXECUTABLE={sys.executable}",
                  f"-DCMAKE_MODULE_LINKER_FLAGS={link_flags}", f"-DXLA_FFI_INCLUDE_DIR={ffi_include}"],
                 [cmake, "--build", str(out), "--target", "_jaccl", "-j", "2"]):
        done = subprocess.run(step, capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    (module,) = out.glob("xla_ffi/_jaccl*.so")
    return module


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("no C++ compiler")
    return build_engine(tmp_path_factory.mktemp("static_libstdcxx"), GPU_MACHINE_LINK,
                        oldest_ffi_headers())


def job(engine, mode, nprocs, devices=1, grace=None, env=None, worker="faults.py"):
    env = {"JACCL_TEST_ENGINE": str(engine), "JACCL_DEBUG": "INFO", "JACCL_TIMEOUT": str(TIMEOUT),
           **(env or {})}
    done = run_job(worker, nprocs, devices, args=[mode] if mode else [], env=env, timeout=300,
                   grace=grace)
    for rank in range(nprocs):  # the module built here ran, not the installed one
        assert done.values(rank, "ENGINE") == [str(engine)], clean(done.output)[-3000:]
    return done


def test_built_with_libstdcxx_inside_it_still_exports_init_alone(engine):
    assert exported(engine) == ["PyInit__jaccl"]


def test_built_with_the_oldest_jax_headers_it_has_an_older_ffi_api_than_this_jax(engine):
    """So the jobs below run handlers of an older FFI API under this jax, as a user's
    `pip install` gives them on a newer jax (jax_jaccl/_ext.py refuses the reverse)."""
    from jax_jaccl._ext import ffi_api_of, running_ffi_api

    done = subprocess.run([sys.executable, "-c", "import sys, common; "
                           "print(sys.modules['jax_jaccl._jaccl'].ffi_api_version())"],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, JACCL_TEST_ENGINE=str(engine),
                                   PYTHONPATH=os.pathsep.join([str(REPO / "tests" / "workers"),
                                                               os.environ.get("PYTHONPATH", "")])))
    assert done.returncode == 0, done.stderr[-3000:]
    built = tuple(int(v) for v in re.findall(r"\d+", done.stdout.splitlines()[-1]))
    assert built == ffi_api_of(oldest_ffi_headers())
    assert built <= running_ffi_api(), (built, running_ffi_api())  # older on jax >= 0.11


def test_without_libfabric_the_ofi_transport_is_refused_clearly(engine):
    done = job(engine, "normal", 2, env={"JACCL_TRANSPORT": "ofi", "JACCL_TEST_FAKE_HOSTS": "2"})
    assert done.returncode != 0
    assert "built without libfabric" in done.output, clean(done.output)[-3000:]
    assert done.leftovers() == []


def test_info_lines_come_out_whole(engine):
    done = job(engine, "normal", 2, devices=2)
    assert done.returncode == 0, clean(done.output)[-4000:]
    for rank in (0, 1):
        assert "FINISHED" in done.lines(rank), clean(done.output)[-3000:]
        info = "\n".join(done.lines(rank))
        assert re.search(rf"INFO process {rank} of 2: 2 local devices, 4 on this host, "
                         r"segment \S+ \d+ KiB", info), info
        assert re.search(r"INFO all_reduce 4000 B \(<= 2\^12\) on rank [0-3]/4 of communicator "
                         r"[0-9a-f]{6,}: algorithm \w+, transports [a-z,]+", info), info


def test_ranks_that_disagree_get_the_whole_message(engine):
    done = job(engine, "shape", 2)
    for rank in (0, 1):
        message = done.raised(rank)[1]
        assert re.search(r"ranks disagree: rank \d \(device \d+, process \d, pid \d+\) is in "
                         r"all_reduce #0 of float32\[[12]000\]", message), message
    assert done.returncode != 0
    assert done.leftovers() == []


def test_killed_peer_is_named_whole(engine):
    done = job(engine, "kill", 3, grace=TIMEOUT + 10)
    for rank in (0, 1):
        message = done.raised(rank)[1]
        assert re.search(r"process 2 \(pid \d+\) died", message), message
    assert done.returncode != 0
    assert done.leftovers() == []


def test_the_value_battery_on_the_engine_pip_builds(engine):
    """The collective battery (every op, dtype, shape and forced algorithm against jax.lax on
    gloo) on the module built as `pip install` builds it, under this jax: 2 processes x 2
    devices, groups within and across processes. Every check of the battery, counted."""
    done = job(engine, None, 2, devices=2, worker="collectives.py")
    assert done.returncode == 0, clean(done.output)[-6000:]
    for rank in (0, 1):
        assert "DONE" in done.lines(rank), clean(done.output)[-3000:]
        assert len(done.values(rank, "OK")) == BATTERY_CHECKS, len(done.values(rank, "OK"))
    assert done.leftovers() == []
