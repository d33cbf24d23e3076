"""Hosts reached by ssh, as a hostfile names them on a cluster: an OpenSSH server on
127.0.0.1 (a port of its own, a host key and a client key made for the test) stands for two
hosts, "jaccl-a" and "jaccl-b" (an ssh config maps both to it; an `ssh` first on PATH hands
jaccl-run's ssh that config), each with its own JACCL_HOST_ID so that jaccl's TCP runs between
them. jaccl-run starts each process through a real ssh session with the job's variables and
the hostfile's `env`; the collective battery's transport types then check every value against
jax.lax on gloo. Needs root (sshd) and openssh-server (.ci/run installs it); skips otherwise,
with the reason (tests/processes/test_ci_tools.py fails in CI where it is missing)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from harness import clean, run_job

SSHD = "/usr/sbin/sshd"
SUPPORT = str(Path(__file__).parents[1] / "support")
BATTERY_CHECKS = 161  # tests/workers/collectives.py's transport types at 2 x 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ssh_hosts(tmp_path):
    """The folder of the `ssh` to put first on PATH; sshd runs until the test ends."""
    if os.geteuid() != 0:
        pytest.skip("an sshd for the test needs root")
    if not Path(SSHD).exists() or shutil.which("ssh-keygen") is None:
        pytest.skip("OpenSSH's server is not installed (apt-get install openssh-server)")
    for key in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / key)],
                       check=True, timeout=30)
    (tmp_path / "authorized_keys").write_text((tmp_path / "client.pub").read_text())
    port = free_port()
    (tmp_path / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp_path / 'host'}\n"
        f"AuthorizedKeysFile {tmp_path / 'authorized_keys'}\nPidFile {tmp_path / 'sshd.pid'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUsePAM no\n"
        "StrictModes no\n")
    (tmp_path / "ssh_config").write_text(
        "Host jaccl-a jaccl-b\n  HostName 127.0.0.1\n"
        f"  Port {port}\n  User root\n  IdentityFile {tmp_path / 'client'}\n"
        "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(f"#!/bin/sh\nexec {shutil.which('ssh')} -F {tmp_path / 'ssh_config'} \"$@\"\n")
    (bin_dir / "ssh").chmod(0o755)
    Path("/run/sshd").mkdir(exist_ok=True)  # its privilege separation directory
    sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", str(tmp_path / "sshd_config")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while subprocess.run([str(bin_dir / "ssh"), "-o", "BatchMode=yes", "jaccl-a", "true"],
                             capture_output=True, timeout=20).returncode != 0:
            assert sshd.poll() is None and time.monotonic() < deadline, "sshd did not start"
            time.sleep(0.2)
        yield bin_dir
    finally:
        sshd.kill()
        sshd.wait()


def test_the_battery_on_hosts_reached_by_ssh(ssh_hosts, tmp_path):
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(json.dumps({"hosts": [
        {"ssh": "jaccl-a", "address": "127.0.0.1", "processes": 1,
         "env": {"JACCL_HOST_ID": "ssh-a", "PYTHONPATH": SUPPORT}},
        {"ssh": "jaccl-b", "address": "127.0.0.1", "processes": 1,
         "env": {"JACCL_HOST_ID": "ssh-b", "PYTHONPATH": SUPPORT}}]}))
    done = run_job("collectives.py", 2, hostfile=str(hostfile), timeout=240,
                   env={"PATH": f"{ssh_hosts}{os.pathsep}{os.environ['PATH']}",
                        "JACCL_TEST_BATTERY_DTYPES": "transport"})
    assert done.returncode == 0, clean(done.output)[-4000:]
    for rank in (0, 1):
        assert done.values(rank, "WORLD") == ["2 hosts"], clean(done.output)[-3000:]
        assert done.values(rank, "TRANSPORT") == ["tcp"], clean(done.output)[-3000:]
        assert "DONE" in done.lines(rank), clean(done.output)[-3000:]
        assert len(done.values(rank, "OK")) == BATTERY_CHECKS, len(done.values(rank, "OK"))
    assert done.leftovers() == []
