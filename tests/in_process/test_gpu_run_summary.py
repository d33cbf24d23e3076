"""run_on_gpu.sh's summary (tests/support/gpu_run_summary.py) from a made-up output folder: the
GPU machine is lent rarely and briefly, so the script that reports on it is checked here."""

from __future__ import annotations

from pathlib import Path

import gpu_run_summary

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.cuda.test_gpu" name="test_battery_in_this_process" time="12.5"/>
<testcase classname="tests.cuda.test_gpu" name="test_killed_peer_fails_every_survivor[peer]" time="3">
  <failure message="AssertionError: [0] jaccl-run: process 1 exited with -11">trace</failure></testcase>
<testcase classname="tests.cuda.test_gpu" name="test_stalled_peer_times_out_on_the_gpu" time="2">
  <failure message="AssertionError: timed out">no signal here</failure></testcase>
<testcase classname="tests.unit.test_symbols" name="test_engine_sources_use_no_iostreams" time="0.1">
  <skipped message="no reason"/></testcase>
</testsuite></testsuites>"""


def made_up_run(tmp_path: Path) -> Path:
    (tmp_path / "machine.log").write_text("NVIDIA H200, 580.159.04, 143771 MiB\njax 0.11.2\n")
    (tmp_path / "build.status").write_text("0 27\n")
    (tmp_path / "junit.xml").write_text(JUNIT)
    (tmp_path / "tests.log").write_text("jaccl 12 INFO process 0 of 1\njaccl 12 INFO all_reduce 16 B\n"
                                        "STREAMS comm=9.10ms plain=12.00ms hidden_streamed=0.80\n"
                                        "== 1 passed, 2 failed, 1 skipped in 75.20s ==\n")
    (tmp_path / "kernels.md").write_text("# jaccl-bench kernels\n\n| kernel | size |\n|---|---|\n\n"
                                         "note: gather: XLA's loop copies on every trip\n")
    (tmp_path / "backtrace.log").write_text("noise\n[1] #0  0x00007f in jaccl::f() from _jaccl.so\n"
                                            "#1  0x00007f in main ()\n")
    (tmp_path / "steps.log").write_text("[0 s] machine\n[80 s] done\n")
    return tmp_path


def test_crashed_names_only_the_tests_whose_processes_died_of_a_signal(tmp_path):
    assert gpu_run_summary.crashed(made_up_run(tmp_path)) == [
        "tests/cuda/test_gpu.py::test_killed_peer_fails_every_survivor[peer]"]


def test_summary_has_build_tests_info_kernels_and_backtrace(tmp_path):
    text = gpu_run_summary.summary(made_up_run(tmp_path))
    assert "build: ok in 27 s" in text
    assert "tests: 1 passed, 2 failed, 0 errors, 1 skipped in 75.20 s, JACCL_DEBUG=INFO (2 INFO lines" in text
    assert "- passed  test_gpu.py::test_battery_in_this_process (12 s)" in text
    assert "- FAILED  test_gpu.py::test_killed_peer_fails_every_survivor[peer] (3 s) - AssertionError: [0] " \
           "jaccl-run: process 1 exited with -11" in text
    assert "    STREAMS comm=9.10ms plain=12.00ms hidden_streamed=0.80" in text
    assert "| kernel | size |" in text and "note: gather: XLA's loop copies on every trip" in text
    assert "    [1] #0  0x00007f in jaccl::f() from _jaccl.so" in text and "    #1  0x00007f in main ()" in text
    assert len(text.splitlines()) < 40


def test_a_failed_build_shows_the_end_of_its_log(tmp_path):
    (tmp_path / "build.status").write_text("1 9\n")
    (tmp_path / "build.log").write_text("ninja: build stopped: subcommand failed.\n")
    text = gpu_run_summary.summary(tmp_path)
    assert "**build FAILED** (exit 1)" in text and "ninja: build stopped" in text
