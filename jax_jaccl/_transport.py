"""Which transport carries frames between hosts, and the libfabric bootstrap.

Contract:
- choose(settings) takes JACCL_TRANSPORT (auto, tcp, ofi), JACCL_OFI_PROVIDER and
  JACCL_OFI_MODE from `settings` (default: _settings.current()) and returns a Choice. `auto` takes libfabric when JACCL_OFI_PROVIDER names a provider that is
  there, or when there is a hardware provider (cxi, efa, verbs;ofi_rxm: an RDMA NIC), and
  jaccl's own TCP otherwise (libfabric's software providers are no faster and add a
  dependency). `ofi` insists:
  without a usable provider it raises ValueError saying why. `tcp` never asks libfabric.
- check_agreement(choices) raises ValueError naming two processes that chose differently.
- exchange(kv, prefix, me, hosts, timeout_s) runs between init_world() and attach_peers() when
  the transport is ofi: every process publishes its endpoint, receive arena and ring geometry,
  and adds every process on another host.
"""

from __future__ import annotations

import dataclasses

from . import _settings
from ._ext import engine


@dataclasses.dataclass(frozen=True)
class Choice:
    transport: str  # "tcp", "ofi", or "none" (one host: no network)
    provider: str   # libfabric provider, "" unless ofi
    why: str
    mode: str = "auto"  # ofi: write, message, or auto (JACCL_OFI_MODE)

    @property
    def label(self) -> str:
        return f"ofi:{self.provider}" if self.transport == "ofi" else self.transport


def choose(settings: _settings.Settings | None = None) -> Choice:
    settings = settings or _settings.current()
    wanted, named, mode = settings.transport, settings.ofi_provider, settings.ofi_mode
    if wanted == "tcp":
        return Choice("tcp", "", "JACCL_TRANSPORT=tcp")
    found, provider, fabric, domain, hardware, why = engine.ofi_choose(named)
    source = f"JACCL_OFI_PROVIDER={named}" if named else "the first RDMA provider"
    if wanted == "ofi":
        if not engine.ofi_built:
            raise ValueError("jaccl: JACCL_TRANSPORT=ofi, but jax_jaccl was built without "
                             "libfabric (apt-get install libfabric-dev, then reinstall)")
        if not found:
            raise ValueError(f"jaccl: JACCL_TRANSPORT=ofi: {why}"
                             + ("" if named else "; name a software provider with "
                                "JACCL_OFI_PROVIDER (e.g. 'tcp;ofi_rxm') to use one"))
        return Choice("ofi", provider, f"JACCL_TRANSPORT=ofi, {source}", mode)
    if found and (named or hardware):
        return Choice("ofi", provider, f"JACCL_TRANSPORT=auto: {source} ({fabric}, {domain})", mode)
    return Choice("tcp", "", f"JACCL_TRANSPORT=auto: jaccl's TCP ({why})")


def check_agreement(labels: list[str]) -> None:
    for p, label in enumerate(labels):
        if label != labels[0]:
            raise ValueError(
                f"jaccl: process 0 sends between hosts over {labels[0]} but process {p} over "
                f"{label}: set the same JACCL_TRANSPORT and JACCL_OFI_PROVIDER everywhere")


def exchange(kv, prefix: str, me: int, hosts: tuple, timeout_s: float) -> None:
    kv.set(f"{prefix}/ofi/{me}", engine.ofi_local_info())
    peers = [(p, kv.get(f"{prefix}/ofi/{p}", timeout_s))
             for p in range(len(hosts)) if hosts[p] != hosts[me]]
    engine.ofi_add_peers(peers)
