"""JAX's coordination-service key-value store, as the bootstrap uses it.

Contract: available after jax.distributed.initialize() in a multi-process job; values are
strings; get() blocks until the key exists or the timeout passes, then raises TimeoutError
naming the key; it raises RuntimeError at once (within half a second) when a process posted
its failure (post_failure(): an uncaught exception before jaccl started there, _uncaught.py).
This wraps jax's own client (a private API jax itself relies on).
"""

from __future__ import annotations

import time

_FAILED = "jaccl/v1/failed/"  # + process index: why that process ended
_POLL_S = 0.5


class KeyValueStore:
    def __init__(self):
        from . import _compat

        client = getattr(_compat.distributed_state(), "client", None)
        if client is None:
            raise RuntimeError(
                "jaccl: this is a multi-process job but jax.distributed has no client; "
                "call jax.distributed.initialize() before using jax_jaccl"
            )
        self._client = client

    def set(self, key: str, value: str, overwrite: bool = False) -> None:
        if overwrite:
            self._client.key_value_set(key, value, allow_overwrite=True)
        else:
            self._client.key_value_set(key, value)

    def dir(self, prefix: str) -> list:
        """(key, value) of every key under `prefix` (a directory, ending in "/"); [] if none."""
        try:
            return list(self._client.key_value_dir_get(prefix))
        except Exception:  # noqa: BLE001 - no such directory yet
            return []

    def delete(self, key: str) -> None:
        """Removes `key` (and the keys under it) if it exists."""
        try:
            self._client.key_value_delete(key)
        except Exception:  # noqa: BLE001 - it did not exist
            pass

    def get(self, key: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            wait = max(0.001, min(_POLL_S, deadline - time.monotonic()))
            try:
                return self._client.blocking_key_value_get(key, int(wait * 1000))
            except Exception as e:  # jax raises XlaRuntimeError / JaxRuntimeError
                if "DEADLINE_EXCEEDED" not in str(e) and "timed out" not in str(e).lower():
                    raise
                timed_out = e
            failed = self.failures()
            if failed:
                process, reason = failed[0]
                raise RuntimeError(f"jaccl: process {process} failed before jaccl started there: "
                                   f"{reason}")
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"jaccl: bootstrap waited {timeout_s:.0f} s for key {key!r}: "
                    "a process did not reach jaccl initialisation (did it crash or run a different program?)"
                ) from timed_out

    def post_failure(self, process: int, reason: str) -> None:
        self._client.key_value_set(f"{_FAILED}{process}", reason)

    def failures(self) -> list:
        """(process, reason) of every process that posted its failure, lowest first."""
        return sorted((int(k.rsplit("/", 1)[1]), v) for k, v in self.dir(_FAILED))
