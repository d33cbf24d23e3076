"""jaccl-bench collectives, moe and overlap run end to end and print a table with every op
and size."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def test_bench_collectives_table(tmp_path):
    plot = tmp_path / "bench.png"
    done = subprocess.run(
        [sys.executable, "-m", "jax_jaccl.bench.cli", "collectives", "--sizes", "4K,256K",
         "--runs", "1", "--vs", "lax", "--donate", "no", "--plot", str(plot)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "; nothing donated" in done.stdout.splitlines()[0], done.stdout
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        assert f"**{op}**" in done.stdout
    rows = [l for l in done.stdout.splitlines() if l.startswith("| 4 KiB") or l.startswith("| 256 KiB")]
    assert len(rows) == 6 and all("—" not in r.split("|")[2] for r in rows), done.stdout
    assert plot.stat().st_size > 10_000


def test_bench_ppermute_and_ragged_tables():
    """The two ops issue 17 measures, with their bars: the shared-memory swap for ppermute,
    the padded all_to_all (jaccl's and jax's) for ragged_all_to_all."""
    done = subprocess.run(
        [sys.executable, "-m", "jax_jaccl.bench.cli", "collectives", "--sizes", "64K,2M",
         "--ops", "ppermute,ragged_all_to_all", "--runs", "1", "--vs", "lax,shm"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "; all_reduce and ppermute donate their input" in done.stdout, done.stdout
    tables = done.stdout.split("**ragged_all_to_all**")
    assert len(tables) == 2 and "**ppermute**" in tables[0], done.stdout
    assert "shm copy (numpy) time" in tables[0] and "jaccl padded time" in tables[1]
    rows = [l for l in done.stdout.splitlines() if l.startswith(("| 64 KiB", "| 2 MiB"))]
    assert len(rows) == 4 and not any("—" in r for r in rows), done.stdout


def test_bench_times_both_doors_to_the_engine():
    """--vs lax_on_jaccl alone: jax.lax's ops on jaccl's engine beside jaccl's own, in one job;
    here each op takes an intermediate of its program (--operand intermediate)."""
    done = subprocess.run(
        [sys.executable, "-m", "jax_jaccl.bench.cli", "collectives", "--sizes", "64K",
         "--ops", "all_reduce,all_gather", "--runs", "1", "--vs", "lax_on_jaccl",
         "--operand", "intermediate"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "; every op takes an intermediate" in done.stdout.splitlines()[0], done.stdout
    assert done.stdout.count("| jaccl busbw / lax on jaccl |") == 2, done.stdout
    rows = [l for l in done.stdout.splitlines() if l.startswith("| 64 KiB")]
    assert len(rows) == 2 and not any("—" in r for r in rows), done.stdout


def _seconds(cell: str) -> float:
    value, unit = cell.split()
    return float(value) * {"us": 1e-6, "ms": 1e-3}[unit]


def test_bench_engine_time_beside_each_door():
    """--engine-time: the engine's own time per call beside jaccl's and jax.lax on jaccl's
    (never more than the call's: the rank least in the engine, within rank 0's timed calls), and
    none for the door that runs ppermute as point-to-point transfers."""
    done = subprocess.run(
        [sys.executable, "-m", "jax_jaccl.bench.cli", "collectives", "--sizes", "4K,1M",
         "--ops", "all_reduce,ppermute", "--runs", "1", "--vs", "lax_on_jaccl",
         "--engine-time"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    reduce, permute = done.stdout.split("**ppermute**")
    header = [c.strip() for c in reduce.split("\n| size")[1].split("\n")[0].split("|")]
    assert header[1:7] == ["jaccl time", "jaccl busbw", "jaccl engine", "lax on jaccl time",
                           "lax on jaccl busbw", "lax on jaccl engine"], reduce
    rows = [l for l in reduce.splitlines() if l.startswith(("| 4 KiB", "| 1 MiB"))]
    assert len(rows) == 2, done.stdout
    for row in rows:
        cells = [c.strip() for c in row.split("|")]
        for time, engine in ((cells[2], cells[4]), (cells[5], cells[7])):
            assert 0 < _seconds(engine) <= _seconds(time), row
    assert "| jaccl engine | lax on jaccl time | lax on jaccl busbw | jaccl busbw" in permute, \
        permute


def test_bench_rejects_unknown_peer():
    done = subprocess.run([sys.executable, "-m", "jax_jaccl.bench.cli", "collectives", "--vs",
                           "nccl"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "unknown --vs" in done.stderr


def test_bench_moe_table(tmp_path):
    plot = tmp_path / "moe.png"
    done = subprocess.run(
        [sys.executable, "-m", "jax_jaccl.bench.cli", "moe", "--tokens", "64", "--hidden", "128",
         "--experts", "4", "--k", "2", "--iters", "2", "--plot", str(plot)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [l for l in done.stdout.splitlines() if l.startswith("| 128 | 4 |")]
    # combine, dispatch (each beside the lax baseline and the memory bound), dispatch fp8
    assert [r.split("|")[3].strip() for r in rows] == ["combine", "dispatch", "dispatch fp8"], \
        done.stdout
    assert all(r.count("x |") == 2 for r in rows[:2]), done.stdout
    assert plot.stat().st_size > 10_000


def test_bench_moe_table_takes_the_median_run():
    from jax_jaccl.bench.moe import by_case

    runs = [{"impl": "jaccl", "hidden": 8, "experts": 2, "op": "combine", "median_s": t}
            for t in (3.0, 1.0, 2.0)]
    assert by_case(runs)[("jaccl", 8, 2, "combine")]["median_s"] == 2.0


def test_bench_help_says_what_every_option_does():
    from jax_jaccl.bench.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    assert set(commands) == {"collectives", "transport", "moe", "overlap", "kernels"}
    for name, command in commands.items():
        silent = [a.option_strings for a in command._actions if not a.help]
        assert not silent, (name, silent)


@pytest.mark.parametrize("workload", ["collective", "step"])
def test_bench_overlap_table(workload):
    """jaccl-bench overlap end to end (2 emulated hosts, both modes), for one collective beside
    matmuls and for a training step reducing per layer: a row per size with every column
    filled; the numbers themselves are the bench's to show, not a test's."""
    from jax_jaccl._emulated_hosts import can_emulate

    reason = can_emulate()
    if reason:
        pytest.skip(f"2 emulated hosts: {reason}")
    done = subprocess.run(
        [sys.executable, "-m", "jax_jaccl.bench.cli", "overlap", "--workload", workload,
         "--sizes", "256K", "--layers", "3", "--link-rate", "1gbit", "--runs", "1",
         "--iters", "2"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [l for l in done.stdout.splitlines() if l.startswith("| 256 KiB")]
    times = 5 if workload == "step" else 4  # the step adds forward + reductions
    assert len(rows) == 1 and rows[0].count(" ms ") == times, done.stdout
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert all(float(c) == float(c) for c in cells[times + 1:]), rows  # the hidden fractions


def test_bench_transport_table(tmp_path):
    """jaccl-bench transport: frames between two processes with host ids of their own, over
    jaccl's TCP, two frame sizes, a table row each with a figure and the JSON behind it."""
    out = tmp_path / "transport.json"
    done = subprocess.run(
        [sys.executable, "-m", "jax_jaccl.bench.cli", "transport", "--transports", "tcp",
         "--frame-kb", "16,256", "--mib", "8", "--runs", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith(("| 16 KiB", "| 256 KiB"))]
    assert len(rows) == 2 and not any("—" in r for r in rows), done.stdout
    records = json.loads(out.read_text())
    assert {r["frame_kb"] for r in records} == {16, 256}, records
    assert all(r["name"] == "tcp" and min(r["gbps"]) > 0 for r in records), records
