"""jaccl-run: starts N processes with the job's environment, prefixes their output with the
rank, stops the others when one fails and exits non-zero, and leaves nothing running. Also
runs the README's demo (the main job) and its quickstart, as written, end to end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from harness import REPO, jaccl_run


def test_environment_and_prefixes():
    script = ("import os; print('rank', os.environ['JACCL_PROCESS_ID'], 'of', "
              "os.environ['JACCL_NUM_PROCESSES'], os.environ['JACCL_LOCAL_DEVICES'], "
              "os.environ['JACCL_COORDINATOR'].startswith('127.0.0.1:'))")
    done = jaccl_run("-n", "3", "--devices-per-process", "2", "--", sys.executable, "-c", script)
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in range(3):
        assert f"[{rank}] rank {rank} of 3 2 True" in done.stdout.splitlines()


# A process's large buffer in transparent huge pages: 64 MiB from glibc's malloc (as XLA's
# buffers are; numpy asks for huge pages itself), written, and how much of the process's
# anonymous memory is huge pages, in MiB.
HUGE_PAGES_SCRIPT = """
import ctypes, os, re
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
buffer = libc.malloc(64 << 20)
ctypes.memset(buffer, 1, 64 << 20)
huge = re.search(r"AnonHugePages:\\s+(\\d+) kB", open("/proc/self/smaps_rollup").read())
print("tunables", os.environ.get("GLIBC_TUNABLES", ""), "huge", int(huge.group(1)) >> 10, "end")
"""


def transparent_huge_pages() -> str:
    """The kernel's mode: always, madvise or never (the bracketed word)."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return re.search(r"\[(\w+)\]", f.read()).group(1)
    except (OSError, AttributeError):
        return "never"


def test_processes_ask_glibc_for_huge_pages():
    """jaccl-run adds glibc.malloc.hugetlb=1 to the tunables its processes start with (beside
    the user's), unless JACCL_HUGE_PAGES=0; where the kernel gives huge pages on request
    (madvise) and glibc knows the tunable, a 64 MiB buffer then lies in them, and without it
    not."""
    runs = {}
    for name, env in (("default", {"GLIBC_TUNABLES": "glibc.malloc.arena_max=4"}),
                      ("off", {"JACCL_HUGE_PAGES": "0", "JACCL_KEEP_FREED_MEMORY": "0",
                               "GLIBC_TUNABLES": ""})):
        done = jaccl_run("-n", "1", "--", sys.executable, "-c", HUGE_PAGES_SCRIPT, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        runs[name] = re.search(r"\[0\] tunables (\S*) huge (\d+) end", done.stdout)
        assert runs[name], done.stdout
    assert runs["default"].group(1) == ("glibc.malloc.arena_max=4:glibc.malloc.hugetlb=1:"
                                        "glibc.malloc.mmap_max=0:"
                                        "glibc.malloc.trim_threshold=4294967296")
    assert runs["off"].group(1) == ""
    glibc = tuple(map(int, os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")[:2]))
    if transparent_huge_pages() != "madvise" or glibc < (2, 35):
        pytest.skip(f"transparent huge pages [{transparent_huge_pages()}], glibc {glibc}: the "
                    "tunable's effect shows only where pages are huge on request (madvise) and "
                    "glibc is 2.35 or newer")
    assert int(runs["default"].group(2)) >= 32 and int(runs["off"].group(2)) < 32, \
        (runs["default"].group(0), runs["off"].group(0))


# A buffer freed and asked for again, as XLA's buffers are on every call: 64 MiB from glibc's
# malloc, written, freed; then 64 MiB again, written: the page faults of the second write.
KEEP_FREED_SCRIPT = """
import ctypes, resource
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
first = libc.malloc(64 << 20)
ctypes.memset(first, 1, 64 << 20)
libc.free(first)
second = libc.malloc(64 << 20)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
ctypes.memset(second, 1, 64 << 20)
print("faults", resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, "end")
"""


def test_processes_keep_what_they_free():
    """jaccl-run starts its processes with glibc's malloc keeping freed memory for the next
    allocation (JACCL_KEEP_FREED_MEMORY, the default): a 64 MiB buffer freed and asked for again
    is written without page faults; with JACCL_KEEP_FREED_MEMORY=0 it is mapped afresh and
    faults in again (at least 32 huge pages)."""
    faults = {}
    for name, env in (("default", {}), ("off", {"JACCL_KEEP_FREED_MEMORY": "0"})):
        done = jaccl_run("-n", "1", "--", sys.executable, "-c", KEEP_FREED_SCRIPT, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        found = re.search(r"\[0\] faults (\d+) end", done.stdout)
        assert found, done.stdout
        faults[name] = int(found.group(1))
    assert faults["default"] < 8 and faults["off"] >= 16, faults


def test_stdout_and_stderr_lines_stay_whole():
    """A line printed in pieces (print() unbuffered writes text and newline separately) is not
    split by a log line the extension writes to stderr in between; a last line without a
    newline still ends one."""
    script = ("import os, time\n"
              "os.write(1, b'DO'); time.sleep(0.2)\n"
              "os.write(2, b'jaccl INFO a log line\\n'); time.sleep(0.2)\n"
              "os.write(1, b'NE\\n'); os.write(1, b'no newline at exit')")
    done = jaccl_run("-n", "2", "--", sys.executable, "-c", script)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for rank in range(2):
        assert f"[{rank}] DONE" in lines, done.stdout
        assert f"[{rank}] jaccl INFO a log line" in lines, done.stdout
        assert f"[{rank}] no newline at exit" in lines, done.stdout


def test_one_failure_stops_the_others():
    marker = f"jaccl-launcher-test-{os.getpid()}"
    script = (f"import os, sys, time; marker = '{marker}'\n"
              "if os.environ['JACCL_PROCESS_ID'] == '1': sys.exit(7)\n"
              "time.sleep(300)")
    start = time.monotonic()
    done = jaccl_run("-n", "3", "--grace", "1", "--", sys.executable, "-c", script)
    assert time.monotonic() - start < 30
    assert done.returncode == 7, done.stdout
    assert "process 1 exited with 7" in done.stdout
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    assert left == ""


def test_keep_going_lets_the_others_finish_and_names_the_lost():
    """--keep-going: a process that exits with an error and one killed by a signal stop no
    one; the job exits 0 because the others finished, and its last line names both, how and
    when. With every process lost, the first failure's code."""
    script = ("import os, signal, sys, time\n"
              "rank = os.environ['JACCL_PROCESS_ID']\n"
              "if rank == '1': sys.exit(5)\n"
              "if rank == '2': time.sleep(0.5); os.kill(os.getpid(), signal.SIGKILL)\n"
              "time.sleep(2); print('finished', rank)")
    done = jaccl_run("-n", "4", "--keep-going", "--", sys.executable, "-c", script)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {"[0] finished 0", "[3] finished 3"} <= set(done.stdout.splitlines()), done.stdout
    assert re.search(r"^jaccl-run: process 1 exited with 5 at \d+\.\d s; the others go on "
                     r"\(--keep-going\)$", done.stdout, re.M), done.stdout
    assert re.search(r"^jaccl-run: process 2 was killed by SIGKILL at \d+\.\d s; the others go on",
                     done.stdout, re.M), done.stdout
    assert re.search(r"jaccl-run: 2 of 4 processes finished; lost: process 1 exited with 5 at "
                     r"\d+\.\d s; process 2 was killed by SIGKILL at \d+\.\d s\n$", done.stdout), \
        done.stdout
    every = jaccl_run("-n", "2", "--keep-going", "--", sys.executable, "-c",
                      "import os, sys, time; time.sleep(int(os.environ['JACCL_PROCESS_ID']))\n"
                      "sys.exit(3 + int(os.environ['JACCL_PROCESS_ID']))")
    assert every.returncode == 3, every.stdout
    assert "0 of 2 processes finished" in every.stdout, every.stdout
    refused = jaccl_run("-n", "2", "--keep-going", "--grace", "1", "--", "true")
    assert refused.returncode == 2 and "exclude each other" in refused.stderr


def test_restarts_start_a_lost_process_again_while_the_budget_lasts():
    """--restarts 2: a lost process starts again with its rank and JACCL_RESTART counting its
    earlier starts, twice in the whole job; the third loss is not restarted. Refused without
    --keep-going."""
    script = ("import os, signal, sys, time\n"
              "rank, again = os.environ['JACCL_PROCESS_ID'], int(os.environ['JACCL_RESTART'])\n"
              "if rank == '1' and again == 0: sys.exit(5)\n"
              "if rank == '2' and again < 2: time.sleep(0.3); os.kill(os.getpid(), signal.SIGKILL)\n"
              "time.sleep(1.5); print('finished', rank, 'start', again)")
    done = jaccl_run("-n", "3", "--keep-going", "--restarts", "2", "--", sys.executable, "-c", script)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {"[0] finished 0 start 0", "[1] finished 1 start 1"} <= set(done.stdout.splitlines()), \
        done.stdout
    assert not re.search(r"^\[2\] finished", done.stdout, re.M), done.stdout
    assert len(re.findall(r"; starting it again \(--restarts\)$", done.stdout, re.M)) == 2, done.stdout
    assert re.search(r"jaccl-run: 2 of 3 processes finished, 2 restarted; lost: process 1 exited "
                     r"with 5 at [\d.]+ s; process 2 was killed by SIGKILL at [\d.]+ s; process 2 "
                     r"was killed by SIGKILL at [\d.]+ s\n$", done.stdout), done.stdout
    refused = jaccl_run("-n", "2", "--restarts", "1", "--", "true")
    assert refused.returncode == 2 and "--restarts needs --keep-going" in refused.stderr


def test_a_killed_launcher_takes_its_processes_with_it():
    """A caller's timeout kills jaccl-run outright (subprocess.run sends SIGKILL): its
    processes, each in a session of its own, die with it, whatever they were doing."""
    marker = f"jaccl-killed-launcher-{os.getpid()}"
    script = f"import time; marker = '{marker}'; print('UP', flush=True); time.sleep(300)"
    with pytest.raises(subprocess.TimeoutExpired):
        jaccl_run("-n", "3", "--", sys.executable, "-c", script, timeout=8)
    deadline = time.monotonic() + 10
    left = "?"
    while left and time.monotonic() < deadline:
        left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
        time.sleep(0.1)
    assert left == "", f"processes left behind: {left}"


def test_bad_arguments():
    assert jaccl_run("-n", "0", "--", "true").returncode != 0
    assert jaccl_run("-n", "2").returncode != 0


@pytest.mark.timeout(600)  # its own deadline, 400 s, comes first
def test_demo_trains_and_matches_lax():
    """make demo's driver, shortened: each layout twice (jax.lax's step on gloo, then on
    jaccl; several devices per process too), every step checked (bit for bit where jax.lax
    runs on jaccl's engine, within float32's summation-order bound on gloo), the step times
    side by side."""
    done = subprocess.run([sys.executable, str(REPO / "examples" / "demo.py"), "--layouts",
                           "2x2,2x1", "--steps", "6", "--every", "3", "--width", "64"],
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    for layout in ("2 processes x 2 devices", "2 processes x 1 device,"):
        assert out.count(layout) == 2, out
    assert "the jax.lax step's collectives: JAX's own (gloo)" in out
    assert "the jax.lax step's collectives: jaccl's engine too" in out
    assert out.count("[0] OK: every step's jaccl and jax.lax results agree bit for bit") == 2, out
    assert out.count("[0] OK: every step's jaccl and jax.lax results agree within float32's "
                     "summation-order bound") == 2, out
    assert re.search(r"\[0\]     6 +[0-9.]+ +[0-9.]+", out), out  # the progress line of step 6
    rows = [l for l in out.splitlines() if l.startswith(("| 2 x 2 |", "| 2 x 1 |"))]
    assert len(rows) == 2 and all(r.count(" ms |") == 4 for r in rows), out
    assert "OK: every job's jaccl and jax.lax steps agree" in out


def near(ours: str, theirs: str) -> bool:
    """Two printed numbers within one and a half units of their last digit."""
    return abs(float(ours) - float(theirs)) <= 1.5 * 10.0 ** -len(ours.split(".")[1])


@pytest.mark.timeout(900)  # six jaccl-run jobs of 120 s at most
def test_readme_quickstart_runs_as_written(tmp_path):
    """The README's quickstart, copied out of the README, on 2 processes, on 3, and on 2 of 3
    CPU devices each: the loss falls, and the same script on jax.lax (the README's one-line
    swap) with JAX's own collectives (gloo: a reference that shares nothing with jaccl's
    engine) prints the same losses: as printed on 2 processes of one device (a sum of two has
    one order), within one unit of the last printed digit on more (gloo's order is its own).
    The small gradients keep clear of gloo's own reduce-scatter bug (jax-ml/jax#40830: chunks
    of megabytes)."""
    readme = (REPO / "README.md").read_text()
    code = readme.split("## Quickstart", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert "from jax_jaccl import lax" in code
    layouts = {"2x1": ["-n", "2"], "3x1": ["-n", "3"], "2x3": ["-n", "2", "--devices-per-process", "3"]}
    for layout, args in layouts.items():
        processes = int(args[1])
        losses = {}
        for lax, carrier in (("from jax_jaccl import lax", []),
                             ("from jax import lax", ["--xla-collectives", "gloo"])):
            script = tmp_path / "quickstart.py"
            script.write_text(code.replace("from jax_jaccl import lax", lax))
            done = jaccl_run(*args, *carrier, "--", sys.executable, str(script), timeout=120)
            assert done.returncode == 0, (layout, done.stdout[-3000:] + done.stderr[-3000:])
            lines = sorted(l for l in done.stdout.splitlines() if "in 200 steps" in l)
            assert [l[:3] for l in lines] == [f"[{p}]" for p in range(processes)], done.stdout
            printed = [l.split("loss ")[1].split(" in")[0].split(" -> ") for l in lines]
            first, last = (float(v) for v in printed[0])
            assert last < first / 10, (layout, lines)
            losses[lax] = [v for pair in printed for v in pair]
        ours, theirs = losses.values()
        if layout == "2x1":
            assert ours == theirs, (layout, losses)
        assert all(near(a, b) for a, b in zip(ours, theirs)), (layout, losses)


@pytest.mark.parametrize("mode", [[], ["--dropless"]], ids=["capacity", "dropless"])
def test_moe_example_trains_and_matches_dense(mode):
    done = jaccl_run("-n", "2", "--devices-per-process", "2", "--", sys.executable,
                     str(REPO / "examples" / "moe_layer.py"), "--steps", "3", *mode, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "[0] OK: expert-parallel and dense losses agree" in done.stdout
    assert "[0] 2 processes x 2 devices" in done.stdout, done.stdout[-3000:]
    assert ("dropless (ragged_dot)" in done.stdout) == bool(mode)
