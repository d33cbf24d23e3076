"""jax 0.12.1's gloo and a warm persistent compilation cache, pinned on the installed jax: the
same plain JAX program of jax.lax collectives (workers/warm_cache.py, 2 processes) runs twice
with one cache folder. On gloo the second run hangs where compile_cache.py says this jax's gloo
does (gloo_hangs_on_cached_programs(); the pytest plugin then gives gloo jobs no shared cache)
and passes where it says it does not: a jax that fixes it fails here, naming the flag to move.
Under jaccl-run's default (XLA's collectives on jaccl's engine) both runs pass, with the gloo
run's results. docs/xla-collectives.md tells the story."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jax_jaccl.testing import compile_cache
from jax_jaccl.testing.placement import reserve_port

import harness

WORKER = Path(__file__).parents[1] / "workers" / "warm_cache.py"
PROCESSES = 2


def plain_gloo(cache: Path, deadline: float) -> tuple[list[str] | None, float]:
    """Every rank's OUT line, or None when the ranks did not all print it within `deadline`
    seconds (then every process is killed); and the seconds the run took."""
    with reserve_port() as port_holder:
        port = port_holder.getsockname()[1]
    args = [str(cache), str(PROCESSES), str(port)]
    procs = [subprocess.Popen([sys.executable, str(WORKER), *args, str(rank)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
             for rank in range(PROCESSES)]
    start = time.monotonic()
    try:
        outputs = [p.communicate(timeout=max(0.1, deadline - (time.monotonic() - start)))[0]
                   for p in procs]
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - start
    finally:
        for p in procs:  # JAX catches SIGTERM (its preemption notifier): SIGKILL
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    lines = [l for out in outputs for l in out.splitlines() if l.startswith("OUT ")]
    assert len(lines) == PROCESSES and all(p.returncode == 0 for p in procs), \
        "\n".join(outputs)[-4000:]
    return sorted(lines), time.monotonic() - start


def jaccl_job(cache: Path) -> list[str]:
    done = harness.jaccl_run("-n", str(PROCESSES), "--", sys.executable, str(WORKER), str(cache),
                             timeout=180, env={"JACCL_TIMEOUT": "30"})
    output = done.stdout + done.stderr
    assert done.returncode == 0, harness.clean(output)[-4000:]
    lines = sorted(l.split("] ", 1)[1] for l in output.splitlines() if "] OUT " in l)
    assert len(lines) == PROCESSES, harness.clean(output)[-4000:]
    return lines


@pytest.mark.timeout(900)  # the runs' own deadlines come first: 180 + 120 + 2 x 180 s at worst
def test_gloo_on_a_warm_cache_hangs_where_this_jax_is_said_to_and_jaccl_passes(tmp_path):
    cold, seconds = plain_gloo(tmp_path / "gloo", deadline=180)
    assert cold is not None, "the cold run on gloo did not finish in 180 s"
    assert list((tmp_path / "gloo").iterdir()), "the cold run wrote no cache entry"
    warm, warm_seconds = plain_gloo(tmp_path / "gloo", deadline=min(120.0, max(20.0, 3 * seconds)))
    hangs = compile_cache.gloo_hangs_on_cached_programs()
    if hangs:
        assert warm is None, (
            f"jaxlib {compile_cache.jaxlib_version()}'s gloo ran the cached program in "
            f"{warm_seconds:.0f} s: move compile_cache.GLOO_HANGS_FROM past it")
    else:
        assert warm == cold, (
            f"jaxlib {compile_cache.jaxlib_version()}'s gloo hung ({warm_seconds:.0f} s) or "
            f"answered otherwise on the cached program: {warm}; GLOO_HANGS_FROM must include it")
    on_jaccl = [jaccl_job(tmp_path / "jaccl") for _ in ("cold", "warm")]
    assert on_jaccl == [cold, cold]
