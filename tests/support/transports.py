"""The transports between hosts that the multi-host tests run over: jaccl's own TCP, and the
OFI transport over libfabric's tcp provider (the code path of an RDMA NIC, over sockets),
with RMA writes (OFI) or with tagged messages (OFI_MESSAGES, the fallback of providers that
cannot write with CQ data, forced here with JACCL_OFI_MODE=message).
Without libfabric the OFI cases skip, with the reason; CI sets JACCL_REQUIRE_OFI=1, and
tests/processes/test_transport_choice.py then fails instead."""

from __future__ import annotations

import pytest

from jax_jaccl._ext import engine

TCP = {"JACCL_TRANSPORT": "tcp"}
OFI = {"JACCL_TRANSPORT": "ofi", "JACCL_OFI_PROVIDER": "tcp;ofi_rxm"}
OFI_MESSAGES = {**OFI, "JACCL_OFI_MODE": "message"}
NO_OFI = None if engine.ofi_built else "jax_jaccl was built without libfabric (apt-get install libfabric-dev)"

needs_ofi = pytest.mark.skipif(NO_OFI is not None, reason=str(NO_OFI))
BOTH = pytest.mark.parametrize("transport", [pytest.param(TCP, id="tcp"),
                                             pytest.param(OFI, id="ofi", marks=needs_ofi)])


def expected(transport: dict) -> str:
    """What a worker's TRANSPORT line says over `transport` (between hosts)."""
    return "ofi:tcp;ofi_rxm" if transport.get("JACCL_TRANSPORT") == "ofi" else "tcp"
