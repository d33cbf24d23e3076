"""Builds the emulated-GPU check program: jaccl's CUDA kernels and peer-path schedules compiled
for the host against the stand-in runtime in shim/, with the checks of this folder.

Contract: build(out_dir) returns the path of the program (exit status 0 = every check passed).
The kernel sources are copied with their launches rewritten (`k<<<grid, block, shared,
stream>>>(args)` -> `emulate_launch(grid, block, shared, stream, k, args)`), device globals made
per emulated GPU, and the device clock read from the host; a source whose constructs these
rewrites do not recognise fails the build instead of being skipped. Compiled with UBSan, so a
misaligned 16-byte access or an out-of-range shift stops the program.

Usage: python tests/cuda_emulation/build.py [out_dir]   (then run the printed program)
"""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import re
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ENGINE = ROOT / "xla_ffi"

KERNELS = ["cuda/reduce.cu", "cuda/moe.cu", "cuda/moe_peer.cu", "cuda/peer.cu"]
HOST_SOURCES = ["handlers/cuda_peer_path.cc", "handlers/cuda_peer_group.cc", "handlers/cuda_moe_peer.cc",
                "common/reduce.cc", "common/dtype.cc", "common/error.cc", "collectives/kinds.cc"]
CHECKS = ["shim/emulation.cc", "emulated_world.cc", "main.cc", "kernel_checks.cc",
          "collective_checks.cc", "moe_checks.cc", "failure_checks.cc"]

_LAUNCH = re.compile(r"([A-Za-z_][\w:]*(?:<[^<>;()]*>)?)\s*<<<(.*?)>>>\s*\(", re.S)
_DEVICE_GLOBAL = re.compile(r"^__device__\s+((?:u?int\d*_t|int|unsigned)\s+\w+\s*=)", re.M)
_GLOBAL_TIMER = re.compile(r'asm\s+volatile\s*\(\s*"mov\.u64 %0, %%globaltimer;"\s*:\s*"=l"\((\w+)\)\s*\);')


def rewrite(source: str, name: str) -> str:
    launches = source.count("<<<")
    source, done = _LAUNCH.subn(lambda m: f"emulate_launch({m.group(2)}, {m.group(1)}, ", source)
    if done != launches:
        raise RuntimeError(f"{name}: rewrote {done} of {launches} kernel launches")
    source = _DEVICE_GLOBAL.sub(r"thread_local \1", source)
    source = _GLOBAL_TIMER.sub(r"\1 = static_cast<uint64_t>(::jaccl_emu::now_ns());", source)
    if re.search(r"\basm\b", source):
        raise RuntimeError(f"{name}: inline assembly the emulation does not know")
    return source


def _ffi_include() -> str:
    import jax.ffi

    return jax.ffi.include_dir()


def build(out_dir: str | os.PathLike, jobs: int = 2) -> pathlib.Path:
    out = pathlib.Path(out_dir)
    (out / "cuda").mkdir(parents=True, exist_ok=True)
    sources = []
    for kernel in KERNELS:
        target = out / kernel.replace(".cu", ".cc")
        target.write_text(rewrite((ENGINE / kernel).read_text(), kernel))
        sources.append(target)
    sources += [ENGINE / s for s in HOST_SOURCES] + [HERE / s for s in CHECKS]
    cxx = os.environ.get("CXX", "g++")
    flags = ["-std=c++17", "-O1", "-g", "-pthread", "-ffp-contract=off", "-fsanitize=undefined",
             "-fno-sanitize-recover=undefined", "-Wall", "-Wno-unused-function",
             f"-I{HERE / 'shim'}", f"-I{HERE}", f"-I{ENGINE}", f"-I{_ffi_include()}"]

    def compile_one(numbered) -> pathlib.Path:
        index, source = numbered
        obj = out / f"{index:02d}_{source.stem}.o"
        result = subprocess.run([cxx, *flags, "-c", str(source), "-o", str(obj)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"compiling {source} failed:\n{result.stderr[-4000:]}")
        return obj

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        objects = list(pool.map(compile_one, enumerate(sources)))
    program = out / "emulated_gpus"
    result = subprocess.run([cxx, *flags, *map(str, objects), "-o", str(program)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"linking failed:\n{result.stderr[-4000:]}")
    return program


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build" / "emulated_gpus"))
