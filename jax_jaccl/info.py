"""jaccl-info: what a jax_jaccl job on this machine would use.

    jaccl-info [--json]
    export $(jaccl-info --xla-collectives-env)   # XLA's own collectives on jaccl (SLURM, Open MPI)

Prints the package and what it was built with (CUDA, libfabric), JAX's devices, the transport
between hosts that JACCL_TRANSPORT and JACCL_OFI_PROVIDER select here and why, the RDM
providers libfabric offers (with RMA, CQ data and progress), and the RDMA devices with their
ports (state, link layer, GIDs): read through pyverbs where it imports (Debian's
python3-pyverbs, from rdma-core; optional), else from /sys/class/infiniband.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

MAX_GIDS = 4  # per port: the first non-zero entries


def rdma_devices() -> dict:
    """{"source": "pyverbs" | "sysfs", "devices": [...], "note": str}."""
    try:
        import pyverbs.device as verbs
    except ImportError:
        return _sysfs_devices()
    try:
        listed = verbs.get_device_list()
    except Exception as e:  # noqa: BLE001  (rdma-core without devices raises here)
        return {"source": "pyverbs", "devices": [], "note": str(e)}
    devices = []
    for dev in listed:
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        entry = {"name": name, "ports": []}
        try:
            ctx = verbs.Context(name=name)
            for port in range(1, ctx.query_device().phys_port_cnt + 1):
                attr = ctx.query_port(port)
                gids = []
                for index in range(attr.gid_tbl_len):
                    gid = str(ctx.query_gid(port, index))
                    if gid.strip("0:") and len(gids) < MAX_GIDS:
                        gids.append(gid)
                entry["ports"].append({
                    "port": port, "state": verbs.port_state_to_str(attr.state),
                    "link_layer": verbs.translate_link_layer(attr.link_layer), "gids": gids})
            ctx.close()
        except Exception as e:  # noqa: BLE001
            entry["error"] = str(e)
        devices.append(entry)
    return {"source": "pyverbs", "devices": devices, "note": ""}


def _sysfs_devices(root: Path = Path("/sys/class/infiniband")) -> dict:
    def read(path: Path) -> str:
        try:
            return path.read_text().strip()
        except OSError:
            return ""

    devices = []
    for dev in sorted(root.iterdir()) if root.is_dir() else []:
        ports = []
        for port in sorted((dev / "ports").iterdir()) if (dev / "ports").is_dir() else []:
            gid_dir = port / "gids"
            gids = [g for g in (read(gid_dir / str(i)) for i in range(16)) if g.strip("0:")]
            ports.append({"port": int(port.name), "state": read(port / "state").split(": ")[-1],
                          "link_layer": read(port / "link_layer"), "gids": gids[:MAX_GIDS]})
        devices.append({"name": dev.name, "ports": ports})
    note = "" if root.is_dir() else f"{root} does not exist (no RDMA kernel support)"
    return {"source": "sysfs", "devices": devices, "note": note}


def gather() -> dict:
    import jax

    import jax_jaccl
    from jax_jaccl import _settings, _transport
    from jax_jaccl._ext import cuda_engine, engine

    # Every setting as a process here would run with it (value, and whether the environment
    # sets it), and JACCL_* variables jaccl does not know.
    settings = {name: {"value": "unknown: ignored", "set": True} for name in _settings.unknown()}
    try:
        values = _settings.read()  # checks every value (a bad one is the error below)
        for v in _settings.VARIABLES:  # shown in the variable's own units
            raw = os.environ.get(v.env, "").strip()
            settings[v.env] = {"value": raw or v.default or "(unset: its default)", "set": bool(raw)}
        choice = _transport.choose(values)
        transport = {"transport": choice.label, "why": choice.why}
    except ValueError as e:
        transport = {"transport": "error", "why": str(e)}
    return {
        "jax_jaccl": getattr(jax_jaccl, "__version__", "0.1.0"),
        "jax": jax.__version__,
        "built": {"cuda": cuda_engine is not None,
                  "libfabric": engine.ofi_version() if engine.ofi_built else None},
        "devices": [str(d) for d in jax.devices()],
        "settings": settings,
        "between_hosts": transport,
        "providers": list(engine.ofi_providers()),
        "rdma": rdma_devices(),
    }


def render(info: dict) -> str:
    lines = [f"jax_jaccl {info['jax_jaccl']} (jax {info['jax']}); built with CUDA: "
             f"{'yes' if info['built']['cuda'] else 'no'}, libfabric: "
             f"{info['built']['libfabric'] or 'no'}",
             f"devices: {', '.join(info['devices'])}"]
    if info["settings"]:
        lines.append("settings (as a process here runs with them; * set in the environment):")
        lines += [f"  {'*' if s['set'] else ' '} {k}={s['value']}" for k, s in info["settings"].items()]
    t = info["between_hosts"]
    lines += [f"between hosts: {t['transport']} ({t['why']})", "", "libfabric providers (RDM):"]
    if info["providers"]:
        lines.append(f"  {'provider':<14} {'kind':<9} {'fabric':<18} {'domain':<10} rma cq-data progress")
        for p in info["providers"]:
            lines.append(f"  {p['provider']:<14} {'hardware' if p['hardware'] else 'software':<9} "
                         f"{p['fabric']:<18} {p['domain']:<10} {'yes' if p['rma'] else 'no ':<3} "
                         f"{p['cq_data_size']:<7} {p['progress']}")
    else:
        lines.append("  none" + ("" if info["built"]["libfabric"] else " (built without libfabric)"))
    rdma = info["rdma"]
    lines += ["", f"RDMA devices ({rdma['source']}):"]
    if not rdma["devices"]:
        lines.append("  no RDMA device" + (f" ({rdma['note']})" if rdma["note"] else ""))
    for dev in rdma["devices"]:
        lines.append(f"  {dev['name']}" + (f": {dev['error']}" if dev.get("error") else ""))
        for port in dev["ports"]:
            gids = ", ".join(port["gids"]) or "no GID"
            lines.append(f"    port {port['port']}: {port['state']}, {port['link_layer']}, {gids}")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="jaccl-info", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object instead of text")
    parser.add_argument("--xla-collectives-env", action="store_true",
                        help="print the variables that put XLA's own collectives on jaccl, as "
                             "NAME=value words for `export` (under SLURM or Open MPI)")
    args = parser.parse_args(argv)
    if args.xla_collectives_env:
        from . import _xla_collectives

        print(" ".join(f"{k}={v}" for k, v in _xla_collectives.environment().items()))
        return
    info = gather()
    print(json.dumps(info, indent=2) if args.json else render(info))


if __name__ == "__main__":
    main()
