"""Runs inside a 2-process jaccl-run job: frames streamed between the first devices of the two
processes (comm/frame_stream.h), one way (process 0 to 1) or both ways at once, and process 1
(or each receiver) measures the bytes per second it received; process 0 writes every receiver's
records to --output as a JSON list of `{"frame_kb": .., "direction": .., "transport": ..,
"process": .., "gbps": [...]}`.

--separate-hosts gives each process a host id of its own (JACCL_HOST_ID), so that two
processes on one machine talk over the network transport (loopback) instead of shared memory.
"""

from __future__ import annotations

import argparse
import json
import os
import threading


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256, help="MiB per measurement and direction")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--both-ways", action="store_true")
    parser.add_argument("--separate-hosts", action="store_true")
    parser.add_argument("--output", required=True, help="JSON file process 0 writes")
    args = parser.parse_args()
    if args.separate_hosts:
        from jax_jaccl import _settings

        os.environ["JACCL_HOST_ID"] = f"bench-host-{_settings.launch().process_id}"

    import jax_jaccl.distributed

    index, count = jax_jaccl.distributed.initialize()
    assert count == 2, "jaccl-bench transport runs 2 processes"
    import jax

    import jax_jaccl as jaccl
    from jax_jaccl._ext import engine

    world = jaccl.init()
    assert world.host_count == 2, "the two processes must be on different hosts"
    first = [min(d.id for d in jax.devices() if d.process_index == p) for p in range(2)]
    me, peer = first[index], first[1 - index]
    payload = world.settings.frame_bytes
    frames = max(64, (args.mib << 20) // payload)
    timeout = world.settings.timeout_s

    def measure(n: int) -> float | None:
        """Frames me -> peer and/or peer -> me; returns what this process received per second."""
        result = {}

        def receive():
            try:
                seconds = engine.receive_frames(peer, me, payload, n, timeout)
                result["gbps"] = (n - 1) * payload / seconds / 1e9
            except BaseException as e:  # noqa: BLE001  (raised again below, in this thread)
                result["error"] = e

        sends = index == 0 or args.both_ways
        receives = index == 1 or args.both_ways
        receiver = threading.Thread(target=receive) if receives else None
        if receiver:
            receiver.start()
        if sends:
            engine.send_frames(me, peer, payload, n, timeout)
        if receiver:
            receiver.join()
        if "error" in result:
            raise result["error"]
        return result.get("gbps")

    measure(max(16, frames // 8))  # warm-up: connections, first touches
    rates = [measure(frames) for _ in range(args.runs)]
    # every process's rates to process 0 (NaN where a process received nothing)
    import numpy as np
    from jax.experimental import multihost_utils

    mine = np.array([np.nan if r is None else r for r in rates], np.float64)
    every = np.asarray(multihost_utils.process_allgather(mine))
    if index == 0:
        direction = "both ways" if args.both_ways else "one way"
        records = [{"frame_kb": payload >> 10, "direction": direction, "transport": world.transport,
                    "process": p, "gbps": every[p].tolist()}
                   for p in range(count) if not np.isnan(every[p]).any()]
        with open(args.output, "w") as f:
            json.dump(records, f)


if __name__ == "__main__":
    main()
