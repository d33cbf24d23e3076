"""The pytest plugin (jax_jaccl.testing) as a user meets it: throwaway projects in a temporary
folder, with nothing but test files (no conftest; an ini file only where a test sets an
option), run with plain `python -m pytest`. Covers a passing multi-host job, the marker's env=,
network=, ranks= and xla_collectives= options and the ones refused, xfail(raises=), an
assertion in one rank, an exception at import in one rank, a killed rank, a hang (stacks
dumped, job killed in time), -x, --lf, pytest-xdist (and the cap on processes across its
workers), coverage of the ranks, the session's compilation cache, and pytest itself killed
mid-job; after each run no rank process,
shared-memory segment, network namespace or job folder of its jobs is left (passed, failed,
skipped in the ranks or killed)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jax_jaccl._emulated_hosts import can_emulate, leftover_namespaces
from jax_jaccl.testing import compile_cache
from jax_jaccl.testing.placement import reserve_port

PROJECTS = Path(__file__).parent / "projects"  # the throwaway projects' files


def source(name: str) -> str:
    """The text of tests/plugin/projects/<name>.py."""
    return (PROJECTS / f"{name}.py").read_text()


def project_env(project) -> dict:
    """The throwaway project's environment: its own temporary folder (project/tmp), so that
    what its jobs leave there can be counted."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "JACCL_"))}
    (project / "tmp").mkdir(exist_ok=True)
    env.update(PLUGIN_TEST_OUT=str(project), COLUMNS="400",  # whole short-summary lines
               TMPDIR=str(project / "tmp"))
    return env


def run_pytest(project, files: dict, *args, timeout=300, cache=False):
    for name, text in files.items():
        (project / name).write_text(text)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", *([] if cache else ["-p", "no:cacheprovider"]), *args],
                          cwd=project, env=project_env(project), capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - start


def assert_nothing_left(project, output):
    left = subprocess.run(["pgrep", "-f", str(project)], capture_output=True, text=True).stdout.split()
    assert left == [], f"rank processes left: {left}"
    for job in re.findall(r"; job ([0-9a-f]{12})", output):
        assert not [p for p in os.listdir("/dev/shm") if p.startswith(f"jaccl-{job}")], job
    folders = [p for p in os.listdir(project / "tmp") if p.startswith("jaccl-pytest-")
               and not p.startswith(("jaccl-pytest-slots-", "jaccl-pytest-compile-cache-"))]
    assert folders == [], f"job folders left: {folders}"
    assert not leftover_namespaces("jpt-")


def test_fresh_project_runs_the_readme_example(tmp_path):
    rc, out, _ = run_pytest(tmp_path, {"test_example.py": source("example")}, "-rP")
    assert rc == 0, out
    assert "1 passed" in out
    seen = {int(p.name[4:]): p.read_text().split() for p in tmp_path.glob("rank*")}
    assert seen == {0: ["0", "4", "2", "8"], 1: ["0", "4", "2", "8"], 2: ["1", "4", "2", "8"], 3: ["1", "4", "2", "8"]}
    where = "network namespaces with veth links" if can_emulate() is None else "loopback"
    assert "4 processes x 2 devices, 2 emulated hosts" in out and where in out, out
    assert "Warning" not in out, out  # none from the plugin's import (an editable install's too)
    assert_nothing_left(tmp_path, out)


def test_failures_name_the_rank_and_show_its_traceback(tmp_path):
    files = {"test_failures.py": source("failures"), "test_import.py": source("import_error")}
    rc, out, seconds = run_pytest(tmp_path, files, "-rA")
    assert rc == 1, out
    assert "4 failed" in out and "1 skipped" in out, out
    assert re.search(r"SKIPPED \[1\] .*nothing to check on this machine", out), out
    # An assertion in one rank: named in the short summary, its rewritten assertion and its output shown.
    assert re.search(r"FAILED test_failures.py::test_assertion_in_one_rank - rank 1/2 failed: AssertionError: rank 1 disagrees", out), out
    assert "assert 1 == 0" in out
    assert "Captured stdout [rank 1] call" in out and "hello from rank 1" in out
    # A rank killed by a signal.
    assert re.search(r"test_killed_rank - rank 1/2 exited with signal SIGKILL", out), out
    # A hang: the hung rank's Python stack (the test's line) is in the report; stopped in time.
    assert re.search(r"test_hang - rank 1/2 hung \(stopped by the job\): at File .*test_failures.py\", line \d+ in test_hang", out), out
    # An exception at import in one rank.
    assert re.search(r"test_import_error_in_one_rank - rank 1/2 failed: RuntimeError: import failed in rank 1", out), out
    assert seconds < 120, seconds
    assert_nothing_left(tmp_path, out)


def test_env_and_network_options(tmp_path):
    rc, out, _ = run_pytest(tmp_path, {"test_options.py": source("options")}, "-rA")
    assert rc == 0, out
    assert "2 emulated hosts on this machine's loopback (JACCL_HOST_ID per host)" in out, out
    assert "(JACCL_HOST_ID per host; rank k on host k % 2)" in out, out
    if can_emulate() is None:
        assert "3 passed" in out and "network namespaces with veth links at 1gbit" in out, out
    else:
        assert re.search(r"SKIPPED .*2 hosts in network namespaces: " + re.escape(can_emulate()), out), out
    assert_nothing_left(tmp_path, out)


def test_options_that_cannot_hold_are_refused(tmp_path):
    bad = {"link_rate on loopback": 'hosts=2, network="loopback", link_rate="1gbit"',
           "link_rate on one host": 'link_rate="1gbit"', "unknown network": 'hosts=2, network="wifi"',
           "env value not a string": 'env={"X": 1}', "uneven hosts": "hosts=3",
           "unknown rank order": 'hosts=2, ranks="random"',
           "unknown xla_collectives": 'xla_collectives="nccl"'}
    for why, options in bad.items():
        text = f"import pytest\n\n@pytest.mark.jax_processes(2, {options})\ndef test_x(jax_job):\n    pass\n"
        rc, out, _ = run_pytest(tmp_path, {"test_bad.py": text}, "-q")
        assert rc == 4 and "@pytest.mark.jax_processes(2" in out, (why, out)


def test_a_link_rate_that_loopback_cannot_apply_is_reported(monkeypatch):
    from jax_jaccl.testing import placement

    monkeypatch.setattr(placement, "can_emulate", lambda: "not root")
    auto = placement.Placement(4, 2, "1gbit", "0123456789ab", "auto")
    try:
        assert auto.namespaces is None and auto.description == (
            "2 emulated hosts on this machine's loopback (JACCL_HOST_ID per host; no network namespaces: "
            "not root; link_rate 1gbit not applied, loopback has no links to limit)")
    finally:
        auto.close()
    with pytest.raises(placement.NoNamespaces, match="2 hosts in network namespaces: not root"):
        placement.Placement(4, 2, None, "0123456789ab", "namespaces")


def test_ranks_fill_hosts_in_order_or_round_robin(monkeypatch):
    from jax_jaccl.testing import placement

    monkeypatch.setattr(placement, "can_emulate", lambda: "not root")
    packed = placement.Placement(6, 3, None, "0123456789ab", "auto")
    dealt = placement.Placement(6, 3, None, "0123456789ab", "auto", "round-robin")
    try:
        assert [packed.host_of(k) for k in range(6)] == [0, 0, 1, 1, 2, 2]
        assert [dealt.host_of(k) for k in range(6)] == [0, 1, 2, 0, 1, 2]
        assert dealt.rank_env(4)["JACCL_TEST_HOST_INDEX"] == "1"
        assert dealt.rank_env(4)["JACCL_HOST_ID"].endswith("-emulated-1")
        assert "; rank k on host k % 3;" in dealt.description and "rank k" not in packed.description
    finally:
        packed.close()
        dealt.close()
    with pytest.raises(ValueError, match="ranks='random'"):
        placement.Placement(2, 2, None, "0123456789ab", "loopback", "random")


def test_xfail_matches_raises_against_each_rank_exception(tmp_path):
    rc, out, _ = run_pytest(tmp_path, {"test_xfail.py": source("xfail")}, "-rA")
    assert rc == 1, out
    assert re.search(r"XFAIL test_xfail.py::test_expected_error\b", out), out
    assert re.search(r"XFAIL test_xfail.py::test_expected_base_class\b", out), out
    assert re.search(r"FAILED test_xfail.py::test_other_error - rank 1/2 failed: ValueError: not a KeyError", out), out
    assert re.search(r"FAILED test_xfail.py::test_strict_xpass\b", out), out
    assert "2 failed, 2 xfailed" in out, out
    assert_nothing_left(tmp_path, out)


def test_exitfirst_stops_after_the_first_failed_job(tmp_path):
    rc, out, _ = run_pytest(tmp_path, {"test_failures.py": source("failures")}, "-x", "-q")
    assert rc == 1 and re.match(r"1 failed(,| in)", out.strip().splitlines()[-1]), out
    assert_nothing_left(tmp_path, out)


def test_jobs_under_xdist(tmp_path):
    pytest.importorskip("xdist", reason="pytest-xdist is in the test extras")
    rc, out, _ = run_pytest(tmp_path, {"test_many.py": source("many")}, "-n", "2", "-q")
    assert rc == 0 and "4 passed" in out, out
    assert_nothing_left(tmp_path, out)


def test_process_cap_holds_across_xdist_workers(tmp_path):
    """jax_processes_max = 2 with two xdist workers: the jobs' processes never overlap (each
    job needs 2 slots, or all of them); a 3-process job still runs, alone."""
    pytest.importorskip("xdist", reason="pytest-xdist is in the test extras")
    (tmp_path / "pytest.ini").write_text("[pytest]\njax_processes_max = 2\n")
    rc, out, _ = run_pytest(tmp_path, {"test_capped.py": source("capped")}, "-n", "2", "-rA")
    assert rc == 0 and "3 passed" in out, out
    jobs = {}
    for path in tmp_path.glob("interval-*"):
        start, end = map(float, path.read_text().split())
        name = path.name.split("-")[1]
        lo, hi = jobs.get(name, (start, end))
        jobs[name] = (min(lo, start), max(hi, end))
    assert sorted(jobs) == ["big", "pair0", "pair1"], jobs
    spans = sorted(jobs.values())
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), f"jobs overlapped: {jobs}"
    assert re.search(r"waited \d+\.\d s for process slots \(jax_processes_max = 2\)", out), out
    assert_nothing_left(tmp_path, out)


def test_coverage_measures_the_ranks(tmp_path):
    """pytest-cov with coverage's own subprocess patch (the way pytest-cov 7 measures
    subprocesses): the lines the job's processes ran count, the others are missing."""
    pytest.importorskip("pytest_cov", reason="pytest-cov is in the test extras")
    (tmp_path / ".coveragerc").write_text("[run]\npatch = subprocess\n")
    files = {"covered.py": source("covered"), "test_cov.py": source("uses_covered")}
    rc, out, _ = run_pytest(tmp_path, files,
                            "--cov=covered", "--cov-report=term-missing", "-q")
    assert rc == 0 and "1 passed" in out, out
    assert re.search(r"^covered\.py\s+4\s+1\s+75%\s+5$", out, re.M), out
    assert_nothing_left(tmp_path, out)


def test_the_job_timeout_rules_over_pytest_timeout(tmp_path):
    """pytest-timeout's ini limit (2 s) does not cut a job short: its own timeout rules."""
    pytest.importorskip("pytest_timeout", reason="pytest-timeout is in the test extras")
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = 2\n")
    rc, out, _ = run_pytest(tmp_path, {"test_slow.py": source("slow")}, "-q")
    assert rc == 0 and "1 passed" in out, out
    assert_nothing_left(tmp_path, out)


def test_jobs_share_a_compilation_cache_when_asked(tmp_path):
    """jax_processes_compilation_cache = session: the first job compiles, the second loads
    the program, and the folder is gone after the session; off by default. (JAX writes entries
    from process 0 only, and on CPU keys a program by the process's own view of the devices:
    there only process 0 loads it.) A gloo job shares it only on a jax whose gloo runs cached
    programs (jax 0.12.1's hangs: compile_cache.py)."""
    def seen():
        return {p.name: p.read_text().split() for p in tmp_path.glob("*-rank*")}

    rc, out, _ = run_pytest(tmp_path, {"test_compiled.py": source("compiled")}, "-q")
    assert rc == 0 and "3 passed" in out, out
    assert set(map(tuple, seen().values())) == {("0", "-")}, seen()
    (tmp_path / "pytest.ini").write_text("[pytest]\njax_processes_compilation_cache = session\n")
    rc, out, _ = run_pytest(tmp_path, {}, "-q")
    assert rc == 0 and "3 passed" in out, out
    by_job = seen()
    gloo = {by_job.pop(f"gloo-rank{r}")[1] for r in range(2)}
    folders = {folder for _, folder in by_job.values()}
    assert len(folders) == 1 and folders != {"-"} and not os.path.exists(folders.pop()), by_job
    assert (gloo == {"-"}) == compile_cache.gloo_hangs_on_cached_programs(), gloo
    assert by_job["job1-rank0"][0] == "0", by_job  # compiled (and written) by the first job
    assert int(by_job["job2-rank0"][0]) >= 1, by_job  # loaded by the second
    assert_nothing_left(tmp_path, out)


def test_last_failed_reruns_only_the_failed_job(tmp_path):
    two = source("many").replace("range(4)", "range(2)")
    rc, out, _ = run_pytest(tmp_path, {"test_failures.py": source("failures"), "test_many.py": two},
                            "-q", "-k", "assertion or job", cache=True)
    assert rc == 1 and re.match(r"1 failed, 2 passed", out.strip().splitlines()[-1]), out
    rc, out, _ = run_pytest(tmp_path, {}, "-q", "--lf", cache=True)
    assert rc == 1 and re.match(r"1 failed(,| in)", out.strip().splitlines()[-1]), out
    assert "test_assertion_in_one_rank" in out  # and none of the jobs that passed
    assert_nothing_left(tmp_path, out)


def test_ranks_die_with_pytest(tmp_path):
    (tmp_path / "test_hang.py").write_text(source("failures"))
    pytest_proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-k", "hang"],
                                   cwd=tmp_path, env=project_env(tmp_path), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(ranks_of(tmp_path)) < 2:
            time.sleep(0.2)
        assert len(ranks_of(tmp_path)) == 2, "the job's two ranks never started"
        pytest_proc.send_signal(signal.SIGKILL)  # no clean-up code of the plugin runs
        pytest_proc.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and ranks_of(tmp_path):
            time.sleep(0.2)
        assert ranks_of(tmp_path) == [], "ranks outlived a killed pytest"
    finally:
        os.killpg(pytest_proc.pid, signal.SIGKILL) if pytest_proc.poll() is None else None
        for pid in ranks_of(tmp_path):
            os.kill(int(pid), signal.SIGKILL)


def ranks_of(project) -> list:
    found = subprocess.run(["pgrep", "-f", f"pytest {project}/"], capture_output=True, text=True).stdout
    return found.split()


def test_a_reserved_port_is_never_handed_out():
    reservation = reserve_port()
    try:
        port = reservation.getsockname()[1]
        for _ in range(2000):
            with socket.socket() as s:
                s.bind(("0.0.0.0", 0))
                assert s.getsockname()[1] != port
        with socket.socket() as s, pytest.raises(OSError):
            s.bind(("0.0.0.0", port))
    finally:
        reservation.close()


def test_a_comparison_with_jax_lax_on_jaccl_is_told(tmp_path):
    """jax_job.xla_collectives says what carries jax.lax; a job that ran jaccl's ops and, by
    default, jax.lax on jaccl's engine too warns that the comparison is jaccl with itself."""
    rc, out, _ = run_pytest(tmp_path, {"test_lax_carrier.py": source("lax_carrier")}, "-rA")
    assert rc == 0 and "3 passed" in out, out
    assert out.count("LaxOnJacclWarning: rank") == 1, out
    assert re.search(r"test_lax_carrier.py::test_by_default\n.*LaxOnJacclWarning: rank 0 ran 1 of "
                     r"jaccl's ops and 1 of XLA's collectives", out), out
    assert_nothing_left(tmp_path, out)
