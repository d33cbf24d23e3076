"""The job that runs covered.py."""

import pytest


@pytest.mark.jax_processes(2, timeout=60)
def test_job(jax_job):
    import covered
    assert covered.only_in_the_job(1) == "positive"
