"""The GPU machine code (SASS) of a built CUDA module, read with cuobjdump (which runs
nvdisasm): on a CUDA toolkit's PATH, or from the nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm wheels of the test extras.

cuobjdump() -> the path of a cuobjdump that can disassemble, or None.
kernels(path, arch) -> {demangled kernel name: [(address, instruction text), ...]} for one
  architecture.
loads_in_flight(instructions) -> (loads, issued_before_first_use) of the kernel's first loop:
  from its first global load (LDG) to the first branch back, how many loads the loop issues
  and how many of them are issued before the first instruction that reads a register one of
  them loaded (where the thread first waits for memory)."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess


def _wheel_bin() -> pathlib.Path | None:
    try:
        import nvidia  # namespace package of NVIDIA's CUDA wheels
    except ImportError:
        return None
    for root in map(pathlib.Path, nvidia.__path__):
        for candidate in sorted(root.glob("cu*/bin")):
            if (candidate / "cuobjdump").exists() and (candidate / "nvdisasm").exists():
                return candidate
    return None


def _environment() -> tuple[str | None, dict]:
    env = dict(os.environ)
    found = shutil.which("cuobjdump") or shutil.which("cuobjdump", path="/usr/local/cuda/bin")
    if found and (shutil.which("nvdisasm", path=str(pathlib.Path(found).parent)) or shutil.which("nvdisasm")):
        env["PATH"] = f"{pathlib.Path(found).parent}{os.pathsep}{env.get('PATH', '')}"  # cuobjdump runs nvdisasm
        return found, env
    wheel = _wheel_bin()
    if wheel is None:
        return None, env
    for tool in ("cuobjdump", "nvdisasm"):  # wheels may unpack without the executable bit
        path = wheel / tool
        if not os.access(path, os.X_OK):
            path.chmod(path.stat().st_mode | 0o111)
    env["PATH"] = f"{wheel}{os.pathsep}{env.get('PATH', '')}"
    return str(wheel / "cuobjdump"), env


def cuobjdump() -> str | None:
    return _environment()[0]


def kernels(path, arch: str) -> dict[str, list[tuple[int, str]]]:
    tool, env = _environment()
    assert tool, "no cuobjdump"
    done = subprocess.run([tool, "-sass", "-arch", arch, str(path)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    blocks = re.split(r"\n\s*Function : (\S+)", done.stdout)
    names, bodies = blocks[1::2], blocks[2::2]
    demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                               check=True).stdout.splitlines()
    found = {}
    for name, body in zip(demangled, bodies):
        found[name] = [(int(m.group(1), 16), m.group(2).strip())
                       for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", body)]
    return found


def loads_in_flight(instructions: list[tuple[int, str]]) -> tuple[int, int]:
    loaded: set[int] = set()
    loads, before_first_use = 0, None
    start = next(i for i, (_, text) in enumerate(instructions) if re.search(r"\bLDG\.", text))
    for address, text in instructions[start:]:
        text = re.sub(r"^@!?U?P\w+\s+", "", text)  # the predicate guards, it is not read data
        branch = re.match(r"BRA (?:\S+, )?(0x[0-9a-f]+)", text)
        if branch and int(branch.group(1), 16) <= address:
            break
        opcode, _, operands = text.partition(" ")
        if opcode.startswith("STG"):
            read = operands.split("],", 1)[-1]  # the stored data, not the address
        elif opcode.startswith("LDG"):
            read = ""  # its address registers come from address arithmetic
        else:
            read = operands.split(",", 1)[-1] if "," in operands else ""
        if before_first_use is None and any(int(r) in loaded for r in re.findall(r"\bR(\d+)\b", read)):
            before_first_use = loads
        written = re.match(r"R(\d+)\b", operands)
        if written and not opcode.startswith(("LDG", "STG")):
            loaded.discard(int(written.group(1)))  # the register holds something else now
        if opcode.startswith("LDG"):
            bits = re.search(r"\.(64|128)\b", opcode)
            width = int(bits.group(1)) // 32 if bits else 1
            first = int(re.match(r"R(\d+)", operands).group(1))
            loaded.update(range(first, first + width))
            loads += 1
    return loads, loads if before_first_use is None else before_first_use
