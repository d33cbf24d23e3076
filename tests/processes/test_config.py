"""Settings read from the environment, in fresh processes: JACCL_DEBUG=INFO logs the transport
and algorithm once per communicator, op and size class; JACCL_ALGO overrides the automatic
choice; a bad setting stops the first op naming it, a misspelt one is a warning; processes of
a job that disagree on a setting they must share all stop, naming it; JACCL_DEBUG=trace and
JACCL_CALL_SITES=0 across processes, under the value battery."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from harness import clean, run_job

SCRIPT = textwrap.dedent("""
    import jax, numpy as np
    jax.config.update("jax_num_cpu_devices", 4)
    from jax.sharding import PartitionSpec as P, NamedSharding
    import jax_jaccl as jaccl
    mesh = jax.make_mesh((4,), ("x",))
    f = jax.jit(jax.shard_map(lambda v: jaccl.all_reduce(v, "x"), mesh=mesh, in_specs=P("x"),
                              out_specs=P()))
    for size in (20, 20, 30, 100_000):
        x = jax.device_put(np.ones(4 * size, np.float32), NamedSharding(mesh, P("x")))
        assert float(f(x)[0]) == 4.0
    print("done")
""")


def run(env):
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, **env))


def info_lines(stderr, rank):
    return [l for l in stderr.splitlines() if " INFO all_reduce" in l and f"rank {rank}/4" in l]


def test_debug_info_logs_choice_once_per_size_class():
    done = run({"JACCL_DEBUG": "INFO"})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = info_lines(done.stderr, 0)
    # 20 and 30 floats share a size class (65-128 bytes); 100_000 floats is another.
    assert len(lines) == 2, lines
    # One process: the group reads its members' buffers directly.
    assert all("algorithm direct" in l and "transports local,local,local" in l for l in lines)


def test_algo_override():
    done = run({"JACCL_DEBUG": "INFO", "JACCL_ALGO": "all_reduce=ring"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert all("algorithm ring" in l for l in info_lines(done.stderr, 0))


def test_bad_algo_override_is_an_error():
    done = run({"JACCL_ALGO": "all_reduce=tree"})
    assert done.returncode != 0
    assert "JACCL_ALGO names an unknown algorithm 'tree'" in done.stderr


def test_interface_selection():
    from jax_jaccl._ext import engine

    assert engine.interface_address("lo") == "127.0.0.1"
    assert engine.address_towards("127.0.0.1") == "127.0.0.1"
    with pytest.raises(RuntimeError, match=r"JACCL_IFNAME=nope0 names no IPv4 interface here \(have: .*lo"):
        engine.interface_address("nope0")


def run_alone(env):
    """SCRIPT in a fresh process with exactly these JACCL_* settings (and no others)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JACCL_")}
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120, env=dict(clean, **env))


def test_a_misspelt_setting_is_a_warning():
    done = run_alone({"JACCL_TIMEOTU": "5"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARN JACCL_TIMEOTU is not a jaccl setting" in done.stderr


def test_a_bad_setting_stops_the_first_op_naming_it():
    done = run_alone({"JACCL_SLOTS": "1"})
    assert done.returncode != 0
    assert "JACCL_SLOTS must be an integer >= 2, not '1'" in done.stderr, done.stderr[-3000:]


@pytest.mark.parametrize("last", ["JACCL_FRAME_KB=256", "JACCL_ALGO=ring"])
def test_processes_that_disagree_on_a_setting_all_stop_naming_it(last):
    """The last process differs: every process stops before any collective, naming the
    variable, and nothing is left behind."""
    name = last.split("=")[0]
    job = run_job("faults.py", 2, args=["normal"], timeout=120,
                  env={"JACCL_TEST_LAST_PROCESS_ENV": last, "JACCL_TIMEOUT": "20"})
    assert job.returncode != 0
    for rank in (0, 1):
        text = "\n".join(job.lines(rank))
        assert f"process 1 has {name}=" in text and "must be the same on every process" in text, \
            clean(job.output)[-3000:]
    assert "FINISHED" not in job.output
    assert job.leftovers() == []


TRANSPORT_CHECKS = 176  # every check of tests/workers/collectives.py's transport types at 2 x 2
TRACE_LINE = re.compile(r"jaccl \d+ TRACE [a-z_]+ #\d+ \d+ B on rank \d+ of communicator "
                        r"[0-9a-f]+( \(XLA's collectives\))?: [a-z_]+ [0-9.e+-]+ us")


def test_trace_lines_and_no_call_sites_across_processes():
    """JACCL_DEBUG=trace (a line per call, written while frames cross between processes: the
    GPU machine's first crash was in this formatting) with JACCL_CALL_SITES=0 (frames carry no
    site): the battery's transport types at 2 processes x 2 devices against jax.lax on gloo,
    every check, and every trace line whole."""
    done = run_job("collectives.py", 2, 2, timeout=300,
                   env={"JACCL_DEBUG": "trace", "JACCL_CALL_SITES": "0",
                        "JACCL_TEST_BATTERY_DTYPES": "transport"})
    assert done.returncode == 0, clean(done.output)[-4000:]
    for rank in (0, 1):
        assert "DONE" in done.lines(rank), clean(done.output)[-3000:]
        assert len(done.values(rank, "OK")) == TRANSPORT_CHECKS, len(done.values(rank, "OK"))
        traced = [l for l in done.lines(rank) if " TRACE " in l]
        assert len(traced) > TRANSPORT_CHECKS, len(traced)
        assert all(TRACE_LINE.fullmatch(l) for l in traced), [l for l in traced
                                                              if not TRACE_LINE.fullmatch(l)][:5]
    assert done.leftovers() == []
