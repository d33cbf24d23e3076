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
        "jaccl_all_reduce", "jaccl_reduce_scatter", "jaccl_all_gather", "jaccl_all_to_all",
        "jaccl_moe_dispatch", "jaccl_moe_combine", "jaccl_ppermute", "jaccl_ragged_all_to_all"}
    assert ext.PLATFORMS == ("cpu", "cuda")
    assert ext.cuda_engine.device_count() >= 0


@pytest.mark.skipif(ext.cuda_engine is None, reason="CPU-only build")
def test_peer_registry_without_a_gpu_is_empty_and_fails_cleanly():
    cuda = ext.cuda_engine
    if cuda.device_count() > 0:
        pytest.skip("a GPU is present: tests/cuda covers the peer path")
    assert cuda.path_counts() == (0, 0)
    assert cuda.readable_pairs() == []
    assert not cuda.any_failure()
    with pytest.raises(RuntimeError, match="jaccl: "):
        cuda.create_workspace(ordinal=0, device=0, process=0, world_devices=1, world_processes=1,
                              data_bytes=1 << 20, timeout_s=1.0)
    ok, why = cuda.open_peer(device=1, process=1, pid=1, handle=b"", bus_id="0000:00:00.0",
                             data_bytes=1 << 20)
    assert not ok and why
