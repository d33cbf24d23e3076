"""JAX's coordination-service key-value store, as the bootstrap uses it.

Contract: available after jax.distributed.initialize() in a multi-process job; values are
strings; get() blocks until the key exists or the timeout passes, then raises TimeoutError
naming the key. This wraps jax's own client (a private API jax itself relies on).
"""

from __future__ import annotations


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

    def set(self, key: str, value: str) -> None:
        self._client.key_value_set(key, value)

    def get(self, key: str, timeout_s: float) -> str:
        try:
            return self._client.blocking_key_value_get(key, int(timeout_s * 1000))
        except Exception as e:  # jax raises XlaRuntimeError / JaxRuntimeError
            if "DEADLINE_EXCEEDED" in str(e) or "timed out" in str(e).lower():
                raise TimeoutError(
                    f"jaccl: bootstrap waited {timeout_s:.0f} s for key {key!r}: "
                    "a process did not reach jaccl initialisation (did it crash or run a different program?)"
                ) from e
            raise
