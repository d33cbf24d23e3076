"""Where a CUDA compiler exists (CI has one), the package carries the CUDA extension: its
handlers register for platform CUDA beside the CPU ones, and importing it needs no GPU."""

from __future__ import annotations

import shutil

import pytest

import jax_jaccl._ext as ext


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no CUDA compiler: CPU-only build")
def test_cuda_extension_is_built_and_importable_without_a_gpu():
    assert ext.cuda_engine is not None, "JACCL_CUDA=AUTO found nvcc but built no _jaccl_cuda"
    assert set(ext.cuda_engine.registrations()) == {
        "jaccl_all_reduce", "jaccl_reduce_scatter", "jaccl_all_gather", "jaccl_all_to_all"}
    assert ext.PLATFORMS == ("cpu", "cuda")
    assert ext.cuda_engine.device_count() >= 0
