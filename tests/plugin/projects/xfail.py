"""xfail(raises=) on jobs: expected errors, a base class, another error, a strict xpass."""

import pytest


class MyError(KeyError):
    pass


def fail_in_rank_1(jax_job, error):
    if jax_job.process_index == 1:
        raise error


@pytest.mark.xfail(raises=ValueError, strict=True)
@pytest.mark.jax_processes(2, timeout=60)
def test_expected_error(jax_job):
    fail_in_rank_1(jax_job, ValueError("as expected"))


@pytest.mark.xfail(raises=(TypeError, LookupError))
@pytest.mark.jax_processes(2, timeout=60)
def test_expected_base_class(jax_job):
    fail_in_rank_1(jax_job, MyError("a LookupError too"))


@pytest.mark.xfail(raises=KeyError)
@pytest.mark.jax_processes(2, timeout=60)
def test_other_error(jax_job):
    fail_in_rank_1(jax_job, ValueError("not a KeyError"))


@pytest.mark.xfail(strict=True)
@pytest.mark.jax_processes(2, timeout=60)
def test_strict_xpass(jax_job):
    pass
