"""An exception at import in one rank."""

import os

import pytest

if os.environ.get("JACCL_PROCESS_ID") == "1":
    raise RuntimeError("import failed in rank 1")


@pytest.mark.jax_processes(2, timeout=60)
def test_import_error_in_one_rank(jax_job):
    pass
