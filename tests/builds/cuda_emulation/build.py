"""Builds the emulated-GPU check program: jaccl's CUDA kernels and peer-path schedules compiled
for the host against the stand-in runtime in shim/, with the checks of this folder.

Contract: build(out_dir) returns the paths of the check program (exit status 0 = every check
passed) and of the whole _jaccl_cuda module built the same way.
The kernel sources are copied with their launches rewritten (`k<<<grid, block, shared,
stream>>>(args)` -> `emulate_launch(grid, block, shared, stream, k, args)`), device globals made
per emulated GPU, and the device clock read from the host; a source whose constructs these
rewrites do not recognise fails the build instead of being skipped. Compiled with UBSan, so a
misaligned 16-byte access or an out-of-range shift stops the program. The module is linked as
the GPU machine's default compiler links a user's extension (GPU_MACHINE_LINK: libstdc++ inside
the module, symbols bound within it), plus what CMake adds (xla_ffi/CMakeLists.txt: static
archives' symbols and everything but the entry points kept out of the dynamic table).

Usage: python tests/builds/cuda_emulation/build.py [out_dir]   (then run the printed program, or
jax_on_emulated_gpus.py with the printed module)
"""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import re
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
ENGINE = ROOT / "xla_ffi"


def _in(folder: str, suffix: str) -> list:
    """The sources of an engine folder, as xla_ffi/CMakeLists.txt globs them."""
    return sorted(str(p.relative_to(ENGINE)) for p in (ENGINE / folder).glob(f"*{suffix}"))


KERNELS = _in("cuda/kernels", ".cu")
# The check program: the kernels and the peer-path schedules, with the core code they use.
HOST_SOURCES = ["cuda/peer_collectives.cc", "cuda/peer_group.cc", "cuda/peer_moe.cc",
                "common/reduce.cc", "common/dtype.cc", "common/error.cc", "collectives/kinds.cc",
                "moe/request.cc"]
# The whole _jaccl_cuda extension as CMake builds it (minus nvcc), for tests that run JAX: its
# folders, and the part of jaccl_core (which CMake links) that they use. The check program's
# sources are among them: compiled once, as the kernels are, and linked into both.
MODULE_SOURCES = _in("handlers/cuda", ".cc") + _in("cuda", ".cc") + [
    "common/call_sites.cc", "common/reduce.cc", "common/dtype.cc", "common/error.cc",
    "common/log.cc", "common/process.cc", "collectives/kinds.cc", "collectives/request.cc", "moe/request.cc"]
assert set(HOST_SOURCES) <= set(MODULE_SOURCES)
# The CUDA handlers' FFI entry points (xla_ffi/handlers/cuda/symbols.h). The module's
# registrations() hands out the emulation's wrapper of each (shim/handlers_on_cpu.cc:
# emulated_<name>, which waits for the handler's stream): module.cc is compiled with each name
# mapped to its wrapper, so the module exports its init function alone, as the real one does.
HANDLERS = re.findall(r"XLA_FFI_Error\* (jaccl_cuda_\w+)\(",
                      (ENGINE / "handlers" / "cuda" / "symbols.h").read_text())
# Compiled first, so that the other sources fill the other jobs meanwhile.
_SLOW_SOURCES = ("kernels/reduce.cc", "nb_combined.cpp")
CHECKS = ["shim/fibers.cc", "shim/runtime.cc", "emulated_world.cc", "main.cc", "kernel_checks.cc",
          "collective_checks.cc", "moe_checks.cc", "failure_checks.cc"]

# How the H200 machine's default compiler (a GCC 13 wrapper) links shared objects: -Bsymbolic
# in its specs; its modules carried their own libstdc++ stream code (std::ostream::_M_insert
# was defined inside _jaccl.so in the backtraces of the H200 run of 2026-11-30).
GPU_MACHINE_LINK = ["-static-libstdc++", "-Wl,-Bsymbolic"]

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


def _flags(shared: bool, xla: bool = True) -> list:
    """The compiler's flags; `xla`: with XLA's FFI headers (the handlers; the kernels and the
    GPU engine need none)."""
    flags = ["-std=c++17", "-O1", "-g1", "-pthread", "-ffp-contract=off", "-fsanitize=undefined",
             "-fno-sanitize-recover=undefined", "-Wall", "-Wno-unused-function",
             f"-I{HERE / 'shim'}", f"-I{HERE}", f"-I{ENGINE}"] + (
                 [f"-I{_ffi_include()}"] if xla else [])
    return flags + (["-fPIC", "-fvisibility=hidden"] if shared else [])


def _compile(sources: list, jobs: int) -> None:
    """Compiles (source, flags, object path) triples, the longest first (jobs at a time)."""
    def compile_one(item) -> pathlib.Path:
        source, flags, obj = item
        result = subprocess.run([_cxx(), *flags, "-c", str(source), "-o", str(obj)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"compiling {source} failed:\n{result.stderr[-4000:]}")
        return obj

    slow_first = sorted(sources, key=lambda item: not str(item[0]).endswith(_SLOW_SOURCES))
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        list(pool.map(compile_one, slow_first))


def _link(objects: list, flags: list, target: pathlib.Path) -> pathlib.Path:
    result = subprocess.run([_cxx(), *flags, *map(str, objects), "-o", str(target)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"linking {target.name} failed:\n{result.stderr[-4000:]}")
    return target


def _cxx() -> str:
    return os.environ.get("CXX", "g++")


def _rewritten_kernels(out: pathlib.Path) -> list:
    (out / "cuda" / "kernels").mkdir(parents=True, exist_ok=True)
    targets = []
    for kernel in KERNELS:
        target = out / kernel.replace(".cu", ".cc")
        target.write_text(rewrite((ENGINE / kernel).read_text(), kernel))
        targets.append(target)
    return targets


def _objects(out: pathlib.Path, sources: list, flags: list) -> list:
    """(source, flags, object) triples for `sources`, each object named after its source."""
    out.mkdir(parents=True, exist_ok=True)
    return [(source, flags + extra, out / f"{index:02d}_{pathlib.Path(source).stem}.o")
            for index, (source, extra) in enumerate(sources)]


def _paths(triples: list) -> list:
    return [obj for _, _, obj in triples]


def build(out_dir: str | os.PathLike, jobs: int = 2) -> tuple:
    """Both builds in one pass, the kernels and the engine sources they share compiled once
    (position-independent, as the module needs them): returns (check program, module).

    The check program is main.cc with the kernels and peer-path schedules. The module is the
    _jaccl_cuda extension over emulated GPUs: import it from its path under the name
    _jaccl_cuda and register what its registrations() gives (entry points that wait for the
    handler's stream) for the CPU platform: CPU device ordinals are GPU ordinals."""
    import sysconfig

    import nanobind

    out = pathlib.Path(out_dir)
    module_dir = out / "module"
    shared = _flags(shared=True)
    # Linked into both targets: the rewritten kernels and the engine sources the program uses.
    both = _objects(out / "kernels", [(k, []) for k in _rewritten_kernels(out)],
                    _flags(shared=True, xla=False))
    both += _objects(out / "engine", [(ENGINE / s, []) for s in HOST_SOURCES],
                     _flags(shared=True, xla=False))
    program = _objects(out / "program", [(HERE / s, []) for s in CHECKS], _flags(shared=False, xla=False))

    nb_src = pathlib.Path(nanobind.source_dir())
    nb_include = pathlib.Path(nanobind.include_dir())
    python = ["-I" + sysconfig.get_paths()["include"], f"-I{nb_include}",
              f"-I{nb_include.parent / 'ext' / 'robin_map' / 'include'}"]
    stream = ["-include", str(HERE / "shim" / "xla_stream.h")]
    to_wrappers = [f"-D{name}=emulated_{name}" for name in HANDLERS]
    module_sources = [(ENGINE / s, stream + python + (to_wrappers if s == "handlers/cuda/module.cc" else []))
                      for s in MODULE_SOURCES if s not in HOST_SOURCES]
    module_sources += [(HERE / "shim" / s, stream) for s in ("fibers.cc", "runtime.cc", "handlers_on_cpu.cc")]
    module_sources += [(nb_src / "nb_combined.cpp", python + ["-w"])]
    module = _objects(module_dir, module_sources, shared)

    _compile(both + program + module, jobs)
    program_path = _link(_paths(both + program), _flags(shared=False), out / "emulated_gpus")
    exports = module_dir / "exports.map"  # the real module's
    exports.write_text("{ global: PyInit_*; local: *; };\n")
    link = ["-shared", *GPU_MACHINE_LINK, "-Wl,--exclude-libs,ALL", f"-Wl,--version-script={exports}"]
    module_path = _link(_paths(both + module), shared + link, module_dir / "_jaccl_cuda.so")
    return program_path, module_path


if __name__ == "__main__":
    out_dir = sys.argv[1] if len(sys.argv) > 1 else ROOT / "build" / "emulated_gpus"
    print(*build(out_dir), sep="\n")
