"""Who carries the collectives XLA emits itself, as jaccl-run chooses and sets up the
processes' environment (tests/processes/test_xla_collectives.py runs the jobs): jaccl for a job
of several processes of one CPU device each, and for several devices per process when asked,
gloo otherwise or when asked; a gloo job drops the mpiabi library's variables it inherited and keeps
a user's own MPI wrapper."""

from __future__ import annotations

import pytest

from jax_jaccl import _xla_collectives, launch


@pytest.mark.parametrize("argv, chosen", [
    (["-n", "2"], "jaccl"),
    (["-n", "4", "--xla-collectives", "gloo"], "gloo"),
    (["-n", "2", "--devices-per-process", "2"], "gloo"),
    (["-n", "1"], "gloo"),
    (["-n", "3", "--xla-collectives", "jaccl"], "jaccl"),
    (["-n", "2", "--devices-per-process", "2", "--xla-collectives", "jaccl"], "jaccl"),
])
def test_jaccl_run_chooses(argv, chosen):
    assert launch.parse(argv + ["--", "python", "x.py"]).xla_collectives == chosen


def test_an_unknown_carrier_is_refused_by_jaccl_run(capsys):
    with pytest.raises(SystemExit):
        launch.parse(["-n", "2", "--xla-collectives", "nccl", "--", "x"])
    assert "--xla-collectives" in capsys.readouterr().err


def test_the_environment_each_choice_gives():
    env = {"PATH": "/bin"}
    _xla_collectives.choose(env, "jaccl")
    assert env == {"PATH": "/bin", "MPITRAMPOLINE_LIB": _xla_collectives.library_path(),
                   "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "mpi", "JACCL_XLA_COLLECTIVES": "jaccl"}
    _xla_collectives.choose(env, "gloo")  # e.g. a gloo job started from inside a jaccl one
    assert env == {"PATH": "/bin", "JACCL_XLA_COLLECTIVES": "gloo"}
    own = {"MPITRAMPOLINE_LIB": "/opt/mpiwrapper/libmpiwrapper.so",
           "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "mpi"}
    _xla_collectives.choose(own, "gloo")
    assert own["MPITRAMPOLINE_LIB"] == "/opt/mpiwrapper/libmpiwrapper.so"
    assert own["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] == "mpi"


def test_an_unknown_carrier_is_refused():
    """The one rule jaccl-run and the pytest plugin's marker both apply."""
    with pytest.raises(ValueError, match="'jaccl' or 'gloo', not 'nccl'"):
        _xla_collectives.resolve("nccl", 2, 1)
    assert _xla_collectives.resolve("jaccl", 2, 2) == "jaccl"  # several devices: when asked
