"""The settings table (jax_jaccl/_settings.py): every variable parses to a field of Settings,
bad values are errors that name the variable, misspelt variables are found, the docs table is
the table, and the engines take their part through configure() (a bad JACCL_ALGO changes
nothing). The numeric codes Python sends come from the engine itself (_codes.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from jax_jaccl import _codes, _settings
from jax_jaccl._ext import engine

DOCS = Path(__file__).parents[2] / "docs" / "settings.md"


def test_every_variable_is_a_field_and_every_field_a_variable():
    fields = {f.name for f in dataclasses.fields(_settings.Settings)}
    assert fields == {v.field for v in _settings.VARIABLES + _settings.BENCH_VARIABLES}
    launch = {f.name for f in dataclasses.fields(_settings.Launch)} - {"ifname"}
    assert launch == {v.field for v in _settings.LAUNCH_VARIABLES}
    names = [v.env for v in
             _settings.VARIABLES + _settings.BENCH_VARIABLES + _settings.LAUNCH_VARIABLES]
    assert len(names) == len(set(names)) and all(n.startswith("JACCL_") for n in names)


def test_defaults_and_values():
    default = _settings.read({})
    assert (default.timeout_s, default.frame_bytes, default.slots, default.spin_us) == \
        (120.0, 512 * 1024, 4, None)
    assert not default.strict_order and default.cuda_path == "auto" and default.debug == "warn"
    set_ = _settings.read({"JACCL_FRAME_KB": "4.5", "JACCL_STRICT_ORDER": "true",
                           "JACCL_DEBUG": "INFO", "JACCL_SPIN_US": "0", "JACCL_TIMEOUT": " 7 "})
    assert set_.frame_bytes == 4608 and set_.strict_order and set_.debug == "info"
    assert set_.spin_us == 0 and set_.timeout_s == 7.0
    assert _settings.read({"JACCL_SLOTS": ""}).slots == 4  # empty: the default


@pytest.mark.parametrize("env, message", [
    ({"JACCL_SLOTS": "1"}, "JACCL_SLOTS must be an integer >= 2, not '1'"),
    ({"JACCL_FRAME_KB": "big"}, "JACCL_FRAME_KB must be a number, not 'big'"),
    ({"JACCL_FRAME_KB": "2"}, "JACCL_FRAME_KB must be at least 4"),
    ({"JACCL_TIMEOUT": "-1"}, "JACCL_TIMEOUT must be a positive number"),
    ({"JACCL_STRICT_ORDER": "maybe"}, "JACCL_STRICT_ORDER must be 0 or 1"),
    ({"JACCL_DEBUG": "loud"}, "JACCL_DEBUG must be warn, none, info or trace, not 'loud'"),
    ({"JACCL_CUDA_PATH": "nvlink"}, "JACCL_CUDA_PATH must be auto, peer or staged"),
    ({"JACCL_MOE_SCHEDULE": "fifo"}, "JACCL_MOE_SCHEDULE must be remote_first or arrival"),
], ids=lambda v: next(iter(v)) if isinstance(v, dict) else None)
def test_a_bad_value_names_its_variable(env, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        _settings.read(env)


def test_misspelt_variables_are_found_and_the_harness_own_are_not():
    env = {"JACCL_TIMEOTU": "5", "JACCL_TIMEOUT": "5", "JACCL_TEST_ENGINE": "x",
           "JACCL_PYTEST_PARENT": "1", "JACCL_REQUIRE_OFI": "1", "JACCL_NUM_PROCESSES": "2",
           "JACCL_CUDA": "OFF", "JACCL_OFI": "ON", "JACCL_TBF_BURST": "1mb", "OTHER": "1"}
    assert _settings.unknown(env) == ["JACCL_TIMEOTU"]


def test_agreed_settings_are_the_marked_ones():
    agreed = _settings.read({}).agreed()
    assert {"JACCL_FRAME_KB", "JACCL_SLOTS", "JACCL_ALGO", "JACCL_TCP_SOCKETS",
            "JACCL_STRICT_ORDER", "JACCL_CUDA_PATH"} <= set(agreed)
    assert "JACCL_TIMEOUT" not in agreed and "JACCL_HOST_ID" not in agreed


def test_the_docs_tables_are_the_settings_tables():
    for table in (_settings.markdown_table(), _settings.markdown_table(_settings.BENCH_VARIABLES)):
        assert table in DOCS.read_text(), \
            "regenerate docs/settings.md's tables with: python -m jax_jaccl._settings"


def test_the_engine_checks_its_part_and_a_bad_one_changes_nothing():
    with pytest.raises(ValueError, match="JACCL_ALGO names an unknown algorithm 'tree'"):
        engine.configure(algorithm="all_reduce=tree", debug="warn", moe_schedule="remote_first",
                         moe_local_delay_us=0, async_min_bytes=-1)
    with pytest.raises(ValueError, match="JACCL_ALGO: all_gather has no algorithm 'naive'"):
        engine.configure(algorithm="all_gather=naive", debug="warn",
                         moe_schedule="remote_first", moe_local_delay_us=0, async_min_bytes=-1)
    with pytest.raises(ValueError, match="JACCL_ALGO names an unknown op 'tree'"):
        engine.configure(algorithm="tree=ring", debug="warn", moe_schedule="remote_first",
                         moe_local_delay_us=0, async_min_bytes=-1)
    with pytest.raises(ValueError, match="JACCL_DEBUG must be"):
        engine.configure(algorithm="", debug="loud", moe_schedule="remote_first",
                         moe_local_delay_us=0, async_min_bytes=-1)
    _settings.hand_to_engines(_settings.current())  # what the process runs with


def test_codes_come_from_the_engine():
    codes = engine.codes()
    assert _codes.REDUCE_OPS == {"sum": 0, "prod": 1, "max": 2, "min": 3} == codes["reduce_ops"]
    assert _codes.ALGORITHMS["auto"] == 0 and len(set(_codes.ALGORITHMS.values())) == 8
    assert _codes.ALL_REDUCE_ALGORITHMS == ("auto", "naive", "mesh", "ring", "ring_oneway",
                                            "hierarchical", "cascade")
    assert _codes.REDUCE_SCATTER_ALGORITHMS == ("auto", "mesh", "ring", "ring_oneway",
                                                "hierarchical")
    assert _codes.ALL_GATHER_ALGORITHMS == ("auto", "mesh", "ring", "ring_oneway")
    assert codes["kinds"]["all_reduce"] == 1 and codes["kinds"]["ragged_all_to_all"] == 8
