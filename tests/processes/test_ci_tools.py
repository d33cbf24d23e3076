"""What .ci/run installs as root for tests that would otherwise skip: Open MPI (the mpirun
tests), iproute2 (hosts in network namespaces), rdma-core's pyverbs (jaccl-info's test) and
OpenSSH's server (hosts reached by ssh).
Where .ci/run sets JACCL_TEST_REQUIRE_TOOLS=1, a missing one fails here, instead of leaving
those tests to skip in silence after the install's warning."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

TOOLS = {
    "mpirun": (lambda: shutil.which("mpirun"), "openmpi-bin (tests/processes/test_mpirun.py)"),
    "ip": (lambda: shutil.which("ip"), "iproute2 (network-namespace hosts, tests/multihost)"),
    "pyverbs": (lambda: Path("/usr/lib/python3/dist-packages/pyverbs").is_dir(),
                "python3-pyverbs (jaccl-info's devices, tests/multihost)"),
    "sshd": (lambda: Path("/usr/sbin/sshd").exists(),
             "openssh-server (hosts reached by ssh, tests/multihost/test_ssh_hosts.py)"),
}


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_what_ci_installs_is_there(tool):
    if os.environ.get("JACCL_TEST_REQUIRE_TOOLS") != "1":
        pytest.skip("JACCL_TEST_REQUIRE_TOOLS is not set: these tools are optional here")
    found, package = TOOLS[tool]
    assert found(), f"{tool} is missing though .ci/run installs {package}"
