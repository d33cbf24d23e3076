"""The few jax internals jax_jaccl needs, in one place, with fallbacks across versions.

Contract: everything here works on jax>=0.10; when jax moves an internal, only this file
changes. Nothing else in the package imports jax._src.
"""

from __future__ import annotations

import jax
from jax._src import core as _core

try:  # jax >= 0.10
    from jax._src.lax import parallel as _parallel
except ImportError:  # pragma: no cover
    _parallel = None

NamedAxisEffect = _core.NamedAxisEffect
Tracer = _core.Tracer


def check_vma_enabled() -> bool:
    """True when shard_map tracks which values vary over which mesh axes (check_vma=True)."""
    from jax._src import config

    flag = getattr(config, "_check_vma", None)
    return bool(flag.value) if flag is not None else False


def varying_axes(aval) -> frozenset:
    mat = getattr(aval, "mat", None)
    if mat is not None:
        return frozenset(mat.varying)
    return frozenset(getattr(aval, "vma", frozenset()))


def with_varying(aval, varying: frozenset, **updates):
    """`aval` updated with `updates` (shape, dtype) and the given varying axes."""
    mat = getattr(aval, "mat", None)
    if mat is not None:
        return aval.update(manual_axis_type=mat.update(varying=frozenset(varying)), **updates)
    return aval.update(vma=frozenset(varying), **updates)


def collective_varying(aval, axes) -> frozenset:
    """The varying axes of a collective's output whose inputs vary over `aval`'s axes and
    which makes them vary over `axes` too; empty without check_vma, as for jax.lax."""
    if not check_vma_enabled():
        return frozenset()
    return varying_axes(aval) | frozenset(axes)


def axis_env_sizes() -> dict:
    """Names and sizes of the mesh axes bound where we are tracing (shard_map's manual axes)."""
    env = _core.get_axis_env()
    return dict(env.axis_sizes)


def manual_mesh_axes() -> frozenset:
    """The mesh axes that shard_map has made manual where we are tracing."""
    mesh = jax.sharding.get_abstract_mesh()
    return frozenset(getattr(mesh, "manual_axes", ()) or ())


def make_varying(x, axes: tuple):
    """pvary `x` over those of `axes` it does not already vary over (auto_pcast, as jax.lax does)."""
    if not check_vma_enabled():
        return x
    missing = tuple(a for a in axes if a not in varying_axes(jax.typeof(x)))
    if not missing:
        return x
    return _parallel.pvary(x, missing)


def pvary(x, axes: tuple):
    return _parallel.pvary(x, axes)


def ir_type(ctx, aval):
    """The MLIR type of `aval` in lowering context `ctx`."""
    from jax.interpreters import mlir

    try:
        return mlir.aval_to_ir_type(ctx.module_context, aval)
    except TypeError:  # older signature
        return mlir.aval_to_ir_type(aval)


def custom_call(*args, **kwargs):
    """jax's own helper that builds an HLO custom call (not re-exported publicly)."""
    from jax._src.interpreters import mlir as _mlir

    return _mlir.custom_call(*args, **kwargs)


def create_token():
    from jax._src.interpreters import mlir as _mlir

    return _mlir.create_token()


def token_set(tokens: dict):
    from jax._src.interpreters import mlir as _mlir

    return _mlir.TokenSet(tokens)


def current_block():
    """The MLIR block ops are being emitted into."""
    from jax.interpreters.mlir import ir

    return ir.InsertionPoint.current.block
