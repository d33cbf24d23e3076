"""pytest for multi-host JAX: run one test in several JAX processes, on emulated hosts.

    import pytest

    @pytest.mark.jax_processes(4, devices_per_process=2, hosts=2, timeout=120)
    def test_my_sharded_step(jax_job):           # runs in each of the 4 processes
        mesh = jax.make_mesh((8,), ("data",))    # 8 CPU devices over 2 emulated hosts
        assert jax_job.process_count == 4

Registered through the `pytest11` entry point: active wherever jax_jaccl is installed.
The marked test runs in N fresh processes (jaccl-run's environment; each a pytest session that
collects the one test again, so its fixtures, parametrization and conftest work there, with
jax_jaccl.distributed.initialize() already called). The pytest process itself never starts
a JAX backend for it and runs none of its fixtures. One result per test: it fails when any
process fails, with each failing process's own traceback and output under its rank; a process
still running at `timeout` seconds has its Python stacks dumped and the job is killed (that
timeout, not pytest-timeout's, unless the test has its own @pytest.mark.timeout).
`hosts=H` puts the processes on H emulated hosts: network namespaces joined by veth links
(`link_rate="1gbit"` limits each) when pytest runs as root, else this machine's loopback with
one JACCL_HOST_ID per host; the test's "jax_processes job" section says which.
`network="loopback"` always uses loopback hosts; `network="namespaces"` skips the test where
namespaces cannot be made (not root), with the reason. Ranks fill the hosts in order (host 0
holds ranks 0..n/H-1); `ranks="round-robin"` puts rank k on host k % H instead. At most
`jax_processes_max` (ini; default twice the CPUs, at least 4) processes of jobs run at once on
the machine, counted over every pytest of the user (xdist workers too): a job waits for its
slots. `env={...}` adds
environment variables to every process (e.g. a transport: {"JACCL_TRANSPORT": "tcp"}).
The collectives XLA emits itself (jit with shardings, jax.lax) run on jaccl's engine as under
jaccl-run (jobs of n > 1 processes of one CPU device each; with several devices per process
under `xla_collectives="jaccl"`); `xla_collectives="gloo"` keeps JAX's own. There a check of
jaccl's ops against jax.lax compares jaccl with itself: a passing job that ran both without
asking for jaccl warns (LaxOnJacclWarning), and jax_job.xla_collectives says which carries jax.lax.
`jax_processes_compilation_cache = session` (ini) lets the jobs share a JAX compilation
cache: a program compiled by one job (the same test over several layouts) is loaded by the
next (compile_cache.py says by which processes).

Caveats: the test module and its skipif conditions are also imported in the pytest process
(keep device work out of import time); fixtures of every scope run once per process per test;
`pytest.skip()` inside a test counts only when every process takes it; a test's xfail mark
applies to the job as a whole (with `raises=`: when some process's exception is one of those).
"""

from __future__ import annotations

import os

import pytest

from .. import _xla_collectives
from . import rank as _rank
from .compile_cache import OPTION as OPTION_COMPILATION_CACHE
from .placement import RANK_ORDERS

MARKER = "jax_processes"


def pytest_addoption(parser):
    parser.addini("jax_processes_timeout", "default timeout (s) of a jax_processes job", default="300")
    parser.addini("jax_processes_max", "most jax_processes ranks running at once on this machine, over "
                  "every pytest of this user (xdist workers too); a bigger job runs alone; 0: no cap",
                  default=str(max(4, 2 * (os.cpu_count() or 1))))
    parser.addini(OPTION_COMPILATION_CACHE, "JAX compilation cache of the jax_processes jobs: 'session' "
                  "(shared by this session's jobs, removed at its end), a folder, or off (the default)",
                  default="")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"{MARKER}(n, devices_per_process=1, hosts=1, timeout=None, link_rate=None, "
        "network='auto', env=None, ranks='packed', xla_collectives=None): run the test in n JAX processes "
        "(jax_jaccl.testing)")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    if _rank.active():
        _rank.start()


NETWORKS = ("auto", "namespaces", "loopback")


def _job_options(config, marker) -> dict:
    def options(n, devices_per_process=1, hosts=1, timeout=None, link_rate=None, network="auto", env=None,
                ranks="packed", xla_collectives=None):
        usage = f"@pytest.mark.{MARKER}({n}, devices_per_process={devices_per_process}, hosts={hosts}"
        if int(n) < 1 or int(devices_per_process) < 1 or int(hosts) < 1 or int(n) % int(hosts):
            raise pytest.UsageError(f"{usage}): need n >= 1 processes filling the hosts evenly")
        if network not in NETWORKS:
            raise pytest.UsageError(f"{usage}, network={network!r}): network is one of {NETWORKS}")
        if link_rate is not None and (network == "loopback" or int(hosts) == 1):
            raise pytest.UsageError(f"{usage}, link_rate={link_rate!r}): a link rate needs hosts > 1 "
                                    "joined by namespaces' links (loopback has no links to limit)")
        if ranks not in RANK_ORDERS:
            raise pytest.UsageError(f"{usage}, ranks={ranks!r}): ranks is one of {RANK_ORDERS}")
        env = dict(env or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise pytest.UsageError(f"{usage}, env={env!r}): env maps names to strings")
        by_default = xla_collectives is None
        try:  # as jaccl-run chooses
            xla_collectives = _xla_collectives.resolve(xla_collectives, int(n),
                                                       int(devices_per_process))
        except ValueError as e:
            raise pytest.UsageError(f"{usage}, xla_collectives={xla_collectives!r}): {e}") from None
        return dict(processes=int(n), devices_per_process=int(devices_per_process), hosts=int(hosts),
                    timeout=float(timeout if timeout is not None else config.getini("jax_processes_timeout")),
                    link_rate=link_rate, network=network, env=env, ranks=ranks,
                    xla_collectives=xla_collectives, xla_collectives_by_default=by_default)

    return options(*marker.args, **marker.kwargs)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    if _rank.active():
        return
    from .job import JobItem

    for i, item in enumerate(items):
        marker = item.get_closest_marker(MARKER) if isinstance(item, pytest.Function) else None
        if marker is not None:
            items[i] = JobItem.from_parent(item.parent, name=item.name, function=item,
                                           **_job_options(config, marker))
            if config.pluginmanager.hasplugin("timeout") and item.get_closest_marker("timeout") is None:
                items[i].add_marker(pytest.mark.timeout(0))  # pytest-timeout: the job's own timeout rules


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if _rank.active() and call.excinfo is not None:
        _rank.note_exception(report, call.excinfo.value)
    return report


def pytest_runtest_logreport(report):
    if _rank.active() and _config is not None:
        _rank.record(_config, report)


def pytest_collectreport(report):
    if _rank.active() and _config is not None and report.failed:  # e.g. an import error
        _rank.record(_config, report)


_config = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    global _config
    _config = session.config


@pytest.fixture
def jax_job(request):
    """The job this test runs in (jax_jaccl.testing.rank.JaxJob); only in jax_processes tests."""
    if not _rank.active():
        pytest.fail(f"the jax_job fixture is for tests marked @pytest.mark.{MARKER}(n)")
    return _rank.JaxJob.here()
