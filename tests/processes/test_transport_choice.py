"""Which transport carries frames between hosts (jax_jaccl/_transport.py), and jaccl-info,
which reports it: JACCL_TRANSPORT=auto takes libfabric only for an RDMA NIC or a provider named
in JACCL_OFI_PROVIDER, `ofi` insists with a clear error, processes that disagree are refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from jax_jaccl import _settings, _transport
from jax_jaccl._ext import engine

from harness import clean, run_job  # noqa: E402
from transports import OFI, needs_ofi  # noqa: E402

HARDWARE = engine.ofi_choose("")[0]


def choose(env: dict) -> _transport.Choice:
    """The choice of a process whose environment holds exactly `env`."""
    return _transport.choose(_settings.read(env))


def test_the_ofi_transport_is_built_where_required():
    """CI sets JACCL_REQUIRE_OFI=1 (.ci/run installs libfabric): there the OFI tests must run."""
    if os.environ.get("JACCL_REQUIRE_OFI") != "1":
        pytest.skip("JACCL_REQUIRE_OFI is not set: libfabric is optional here")
    assert engine.ofi_built, "built without libfabric although .ci/run installs libfabric-dev"


@pytest.mark.skipif(HARDWARE, reason="an RDMA provider is present: auto takes it")
def test_auto_is_jaccl_tcp_without_an_rdma_nic():
    choice = choose({})
    assert choice.label == "tcp" and "auto" in choice.why and "no RDMA provider" in choice.why


def test_tcp_when_asked_and_bad_names_refused():
    assert choose({"JACCL_TRANSPORT": "tcp", "JACCL_OFI_PROVIDER": "efa"}).label == "tcp"
    with pytest.raises(ValueError, match="must be auto, tcp or ofi"):
        choose({"JACCL_TRANSPORT": "rdma"})
    with pytest.raises(ValueError, match="JACCL_OFI_MODE must be auto, write or message"):
        choose({"JACCL_OFI_MODE": "read"})


@needs_ofi
def test_a_named_software_provider_is_used_and_an_absent_one_refused():
    assert choose(OFI).label == "ofi:tcp;ofi_rxm"
    assert choose({"JACCL_OFI_PROVIDER": "tcp;ofi_rxm"}).label == "ofi:tcp;ofi_rxm"
    assert choose({"JACCL_OFI_PROVIDER": "no-such-provider"}).label == "tcp"
    with pytest.raises(ValueError, match="no RDM endpoint of provider 'no-such-provider'"):
        choose({"JACCL_TRANSPORT": "ofi", "JACCL_OFI_PROVIDER": "no-such-provider"})


@pytest.mark.skipif(HARDWARE, reason="an RDMA provider is present")
def test_ofi_without_an_rdma_nic_says_how_to_name_a_software_provider():
    with pytest.raises(ValueError, match="no RDMA provider.*JACCL_OFI_PROVIDER"):
        choose({"JACCL_TRANSPORT": "ofi"})


def test_processes_that_chose_differently_are_named():
    _transport.check_agreement(["ofi:efa"] * 3)
    with pytest.raises(ValueError, match="process 0 .* over tcp but process 2 over ofi:efa"):
        _transport.check_agreement(["tcp", "tcp", "ofi:efa"])


@needs_ofi
@pytest.mark.parametrize("last, detail", [
    ("JACCL_OFI_PROVIDER=sockets", "over ofi:tcp;ofi_rxm but process 1 over ofi:sockets"),
    ("JACCL_OFI_MODE=message", "moves frames by "),
], ids=["provider", "mode"])
def test_a_job_whose_processes_disagree_fails_at_start(last, detail):
    env = {**OFI, "JACCL_TEST_FAKE_HOSTS": "2", "JACCL_TIMEOUT": "20",
           "JACCL_TEST_LAST_PROCESS_ENV": last}
    job = run_job("faults.py", 2, args=["normal"], env=env, timeout=120)
    assert job.returncode != 0
    assert detail in job.output, clean(job.output)[-3000:]
    assert "FINISHED" not in job.output
    assert job.leftovers() == []


def info(env=None, *args):
    done = subprocess.run([sys.executable, "-m", "jax_jaccl.info", *args], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, **(env or {})))
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@needs_ofi
def test_jaccl_info_lists_providers_transport_and_no_rdma_device():
    text = info({"PYTHONPATH": ""})
    assert "libfabric: 1." in text and "tcp;ofi_rxm" in text, text
    assert "between hosts: " in text and "RDMA devices (" in text, text
    if not HARDWARE:
        assert "no RDMA device" in text, text
    assert "    JACCL_MOE_SCHEDULE=remote_first\n" in text, text  # every setting, defaults too
    data = json.loads(info({"JACCL_TRANSPORT": "ofi", "JACCL_NOT_A_SETTING": "1", **OFI}, "--json"))
    assert data["settings"]["JACCL_TRANSPORT"] == {"value": "ofi", "set": True}
    assert data["settings"]["JACCL_MOE_SCHEDULE"]["set"] is False
    assert data["settings"]["JACCL_NOT_A_SETTING"]["value"] == "unknown: ignored"
    assert data["between_hosts"]["transport"] == "ofi:tcp;ofi_rxm"
    assert any(p["provider"] == "tcp;ofi_rxm" and p["rma"] for p in data["providers"])


def test_jaccl_info_reads_devices_through_pyverbs(tmp_path):
    """A stand-in pyverbs with one device (the shape of rdma-core's API): its ports come out."""
    (tmp_path / "pyverbs").mkdir()
    (tmp_path / "pyverbs" / "__init__.py").write_text("")
    (tmp_path / "pyverbs" / "device.py").write_text(textwrap.dedent('''
        import types
        def get_device_list():
            return [types.SimpleNamespace(name=b"mlx5_0")]
        def port_state_to_str(s):
            return {4: "PORT_ACTIVE"}[s]
        def translate_link_layer(l):
            return {1: "InfiniBand", 2: "Ethernet"}[l]
        class Context:
            def __init__(self, name):
                assert name == "mlx5_0"
            def query_device(self):
                return types.SimpleNamespace(phys_port_cnt=1)
            def query_port(self, port):
                return types.SimpleNamespace(state=4, link_layer=2, gid_tbl_len=3)
            def query_gid(self, port, index):
                return ["fe80:0000:0000:0000:0202:c9ff:fe00:0001", "0000:0000:0000:0000:0000:0000:0000:0000",
                        "0000:0000:0000:0000:0000:ffff:0a00:0001"][index]
            def close(self):
                pass
    '''))
    text = info({"PYTHONPATH": str(tmp_path)})
    assert "RDMA devices (pyverbs):" in text, text
    assert ("port 1: PORT_ACTIVE, Ethernet, fe80:0000:0000:0000:0202:c9ff:fe00:0001, "
            "0000:0000:0000:0000:0000:ffff:0a00:0001") in text, text


DEBIAN_PYVERBS = Path("/usr/lib/python3/dist-packages/pyverbs")


# Debian builds it for the system Python only (make test-oldest's, 3.11 here).
_TAG = sysconfig.get_config_var("SOABI")
DEBIAN_PYVERBS_HERE = DEBIAN_PYVERBS.is_dir() and any(DEBIAN_PYVERBS.glob(f"*.{_TAG}.so"))


@pytest.mark.skipif(not DEBIAN_PYVERBS_HERE,
                    reason=f"Debian's python3-pyverbs is not installed for this Python ({_TAG})")
def test_jaccl_info_with_rdma_cores_pyverbs(tmp_path):
    """The real pyverbs (rdma-core, from apt): with no RDMA device it says so."""
    (tmp_path / "pyverbs").symlink_to(DEBIAN_PYVERBS)
    text = info({"PYTHONPATH": str(tmp_path)})
    assert "RDMA devices (pyverbs):" in text, text
    if not HARDWARE:
        assert "no RDMA device" in text, text
