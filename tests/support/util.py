"""Helpers for the single-process suites: a 4-device mesh, exact test data, and shard_map
wrappers that return every device's result stacked on a new leading axis; the call-site
attributes of a lowering; the emulated-GPU build script and other suites' test files as
modules."""

from __future__ import annotations

import importlib.util
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

N = 4

DTYPES = [np.float16, jnp.bfloat16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
          np.uint8, np.uint32, np.bool_, np.complex64, np.complex128]
WIDE = (np.float64, np.int64, np.complex128)  # need jax_enable_x64


def dtype_id(dtype) -> str:
    return np.dtype(dtype).name


def mesh1d():
    return jax.make_mesh((N,), ("x",))


def mesh2d():
    return jax.make_mesh((2, 2), ("a", "b"))


def exact_data(shape, dtype, seed=0, low=-3, high=4):
    """Values whose sums, products, maxima and minima over 4 devices are exact in `dtype`."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if np.issubdtype(dtype, np.unsignedinteger):
        return rng.integers(0, high, size=shape).astype(dtype)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(low, high, size=shape).astype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        parts = rng.integers(low * 4, high * 4, size=(2,) + tuple(shape)) / 4
        return (parts[0] + 1j * parts[1]).astype(dtype)
    return (rng.integers(low * 4, high * 4, size=shape) / 4).astype(dtype)


def every_bit_pattern(dtype, shape, seed=0):
    """Values of a narrow type (jax_jaccl._ops._common.NARROW) in a random order, each bit
    pattern as often as the next: all of them where the shape holds 256 (8-bit types: NaNs with
    their payloads, infinities, -0, subnormals) or 16 (4-bit types) elements or more."""
    import ml_dtypes

    from jax_jaccl._ops import _common

    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    size = int(np.prod(shape))
    if dtype in _common.SUB_BYTE and dtype.kind in "iu":
        info = ml_dtypes.iinfo(dtype)
        values = np.arange(int(info.min), int(info.max) + 1)
        return rng.permutation(np.resize(values, size)).reshape(shape).astype(dtype)
    high = 16 if dtype in _common.SUB_BYTE else 256
    bits = rng.permutation(np.resize(np.arange(high, dtype=np.uint8), size))
    return bits.reshape(shape).view(dtype)


def put(array, mesh, spec=P("x")):
    return jax.device_put(array, NamedSharding(mesh, spec))


def stacked(fn, mesh, in_spec=P("x"), jit=True, axes=("x",)):
    """shard_map(fn) whose outputs come back as [device, ...] (each device's own result)."""
    per_device = lambda *a: jax.tree.map(lambda r: r[None], fn(*a))  # noqa: E731
    out = jax.shard_map(per_device, mesh=mesh, in_specs=in_spec, out_specs=P(axes))
    return jax.jit(out) if jit else out


def as_bytes(a) -> np.ndarray:
    a = np.asarray(a)
    return np.ascontiguousarray(a).view(np.uint8).reshape(a.shape[0], -1) if a.size else a


def assert_same_on_every_device(a):
    rows = as_bytes(a)
    for i in range(1, rows.shape[0]):
        np.testing.assert_array_equal(rows[0], rows[i], err_msg=f"device {i} differs from device 0")


def assert_equal(actual, expected, err_msg=""):
    """The same shape, dtype and bits: -0 is not +0, and NaNs match only with their payloads
    (numpy's array_equal would pass both)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape, err_msg)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype, err_msg)
    if actual.dtype.kind == "O" or actual.size == 0:
        np.testing.assert_array_equal(actual, expected, err_msg=err_msg)
        return
    unsigned = np.dtype(f"u{actual.dtype.itemsize}") if actual.dtype.itemsize in (1, 2, 4, 8) \
        else np.dtype(np.uint8)
    a = np.ascontiguousarray(actual).view(unsigned).reshape(actual.shape + (-1,))
    b = np.ascontiguousarray(expected).view(unsigned).reshape(expected.shape + (-1,))
    differ = np.nonzero((a != b).any(axis=-1))
    if differ[0].size:
        first = tuple(int(i[0]) for i in differ)
        raise AssertionError(
            f"{err_msg}: {differ[0].size} of {actual.size} elements differ in their bits; the "
            f"first at {first}: {actual[first]!r} (bits {a[first]}) where {expected[first]!r} "
            f"(bits {b[first]}) was expected")


def blocks(array) -> dict:
    """{where its block starts along axis 0: the block} for this process's shards of `array`.
    A single shard covering the whole axis has the index slice(None): it starts at 0."""
    return {s.index[0].start or 0: np.asarray(s.data) for s in array.addressable_shards}


def load_cuda_emulation_build():
    """tests/builds/cuda_emulation/build.py, loaded by path under a name of its own (`build` may also
    be an installed package)."""
    path = pathlib.Path(__file__).resolve().parents[1] / "builds" / "cuda_emulation" / "build.py"
    spec = importlib.util.spec_from_file_location("jaccl_cuda_emulation_build", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sites(f, *args, attribute: str = "site") -> list[int]:
    """The site attribute (or another int64 one) of every jaccl custom call in f's lowering,
    in program order."""
    text = jax.jit(f).lower(*args).as_text()
    calls = re.findall(r"custom_call @jaccl_\w+\(.*?\n", text)
    assert calls, text
    found = [re.search(rf"\b{attribute} = (-?\d+)", c) for c in calls]
    assert all(found), calls
    return [int(m.group(1)) for m in found]


def on_mesh(body):
    mesh = mesh1d()
    return jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x")), put(
        np.ones(N * 8, np.float32), mesh)


def load_test_file(path: str):
    """tests/<path>.py as a module of its own (pytest imports test files by path, not by name),
    so one suite can run another's tests under its own fixtures."""
    file = pathlib.Path(__file__).resolve().parents[1] / f"{path}.py"
    spec = importlib.util.spec_from_file_location(f"borrowed_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pip_build_jax() -> str:
    """The jax version pip builds jax_jaccl with: pyproject.toml's build requirement jax==X."""
    import tomllib

    project = tomllib.loads((pathlib.Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    (pin,) = [r for r in project["build-system"]["requires"] if r.startswith("jax")]
    assert pin.startswith("jax=="), pin
    return pin[len("jax=="):]
