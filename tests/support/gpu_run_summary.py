"""The one-screen summary of run_on_gpu.sh, from the files it left in its output folder:
machine.log, build.status/build.log, junit.xml/tests.log, kernels.md, backtrace.log, steps.log.

Usage: python gpu_run_summary.py OUT            prints the summary (Markdown)
       python gpu_run_summary.py --crashed OUT  prints the node ids of tests whose process (or a
                                                process they started) died of a signal
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

# How a death by signal shows in a failure: jaccl-run's report, the shell's, Python's
# faulthandler's, pytest-xdist's.
CRASH = re.compile(r"exited with -\d+|was killed by (SIG|signal )|Segmentation fault|SIGSEGV|"
                   r"SIGABRT|SIGBUS|Fatal Python error|core dumped|crashed while running|"
                   r"node down|returncode=-\d+|died with <Signals")
FRAME = re.compile(r"^(?:\[\d+\] )?#\d+ .*", re.M)


def read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def test_cases(out: Path) -> list[dict]:
    """[{id, outcome, seconds, text}] from junit.xml (empty when the tests did not run)."""
    if not (out / "junit.xml").exists():
        return []
    cases = []
    for case in ET.parse(out / "junit.xml").getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        outcome, text = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[child.tag]
                text = (child.get("message") or "") + "\n" + (child.text or "")
        cases.append({"id": f"{module}.py::{case.get('name')}", "outcome": outcome,
                      "seconds": float(case.get("time", 0)), "text": text})
    return cases


def crashed(out: Path) -> list[str]:
    return [c["id"] for c in test_cases(out) if c["outcome"] in ("FAILED", "ERROR")
            and CRASH.search(c["text"])]


def summary(out: Path) -> str:
    lines = ["# jax_jaccl GPU check (tests/cuda/run_on_gpu.sh)", ""]
    lines += ["    " + l for l in read(out / "machine.log").splitlines()[:6]]
    status = read(out / "build.status").split()
    if not status or status[0] != "0":
        lines += ["", f"**build FAILED** (exit {status[0] if status else '?'}); end of build.log:", ""]
        lines += ["    " + l for l in read(out / "build.log").splitlines()[-25:]]
        return "\n".join(lines) + "\n"
    lines += ["", f"build: ok in {status[1]} s (JACCL_CUDA=ON, pip install -e ., the machine's own "
              "compiler)"]

    cases = test_cases(out)
    counts = {k: sum(c["outcome"] == k for c in cases) for k in ("passed", "FAILED", "ERROR", "skipped")}
    log = read(out / "tests.log")
    info = sum(1 for l in log.splitlines() if re.search(r"jaccl \d+ INFO ", l))
    ran = re.search(r"in ([\d.]+)s", log.splitlines()[-1]) if log.strip() else None
    lines += [f"tests: {counts['passed']} passed, {counts['FAILED']} failed, {counts['ERROR']} errors, "
              f"{counts['skipped']} skipped{' in ' + ran.group(1) + ' s' if ran else ''}, "
              f"JACCL_DEBUG=INFO ({info} INFO lines in the log)", ""]
    if not cases:
        lines += ["    " + l for l in log.splitlines()[-15:]]
    for c in cases:
        reason = ""
        if c["outcome"] != "passed":
            first = next((l.strip() for l in c["text"].splitlines() if l.strip()), "")
            reason = " - " + first[:110]
        lines.append(f"- {c['outcome']:7} {c['id'].split('/')[-1]} ({c['seconds']:.0f} s){reason}")

    kernels = [l for l in read(out / "kernels.md").splitlines() if l.startswith(("|", "#", "note:"))]
    lines += ["", "kernels (jaccl-bench kernels):", ""] + (kernels or ["    (no table; see kernels.log)"]
                                                          + ["    " + l for l in
                                                             read(out / "kernels.log").splitlines()[-5:]])
    streams = sorted(set(re.findall(r"STREAMS .*", log)))
    if streams:
        lines += ["", "a jaccl all_reduce on a GPU stream of its own (compute_on, gpu_streams.py):"]
        lines += ["    " + s for s in streams]
    frames = FRAME.findall(read(out / "backtrace.log"))
    if (out / "backtrace.log").exists():
        lines += ["", "backtrace.log (cuda-gdb, the first crashed test):"]
        lines += ["    " + f for f in frames[:14]] or ["    (no frames)"]
    lines += ["", "steps: " + "; ".join(read(out / "steps.log").splitlines())]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    if argv[:1] == ["--crashed"]:
        print("\n".join(crashed(Path(argv[1]))))
    else:
        print(summary(Path(argv[0])), end="")


if __name__ == "__main__":
    main(sys.argv[1:])
