"""What every jaccl collective shares: argument checks at trace time, the device groups a
mesh axis defines, and the lowering to an effectful FFI custom call.

Contract:
- normalize_axes/check_axes/check_dtype raise ValueError or TypeError saying what to change.
- to_engine(x, reduces=...) puts an operand in a form the engine carries (complex as real
  pairs; the narrow types, NARROW, as XLA:CPU carries them) and returns the function that turns
  the op's result back; move(op, x) runs an op that only moves elements through it, keeping its
  derivative where the form is a narrow float's bytes.
- group_table(ctx, axes) returns the global device ids of every group, in rank order, computed
  from the concrete mesh the op is lowered for (rank = jax.lax.axis_index over `axes`).
- refuse_unfit_algorithm() raises ValueError where an algorithm asked for by name needs a
  layout of processes or hosts the groups lack (cascade, hierarchical).
- widened_as_xla_cpu_reduces(rule) is `rule` running a bfloat16 reduction in float32, as
  XLA:CPU runs its own (the CPU lowering of all_reduce and reduce_scatter).
- lower_collective() makes sure the engine is initialised, then emits a custom call with
  has_side_effect=True (XLA must neither drop nor merge collectives) that takes and returns
  the ordering token of _ordering (every device must run its collectives in the same order).
"""

from __future__ import annotations

import math

import jax
import numpy as np
from jax.interpreters import mlir
from jax.interpreters.mlir import ir

from .. import _bootstrap, _call_site, _compat, _ext
from .._compat import manual_region
from .. import _ordering

SUPPORTED_DTYPES = tuple(np.dtype(d) for d in (
    "float16", jax.numpy.bfloat16, "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "bool", "complex64", "complex128"))


def normalize_axes(axis_name) -> tuple:
    axes = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
    if not axes:
        raise ValueError("jaccl: axis_name must name at least one mesh axis")
    if len(set(axes)) != len(axes):
        raise ValueError(f"jaccl: axis_name {axis_name!r} repeats an axis")
    return axes


def vmap_axes(axes: tuple) -> tuple:
    """Those of `axes` that jax.vmap (axis_name=...) bound where we are tracing, not
    shard_map: a collective over them is a computation on the batch, done by jax.lax."""
    sizes = _compat.axis_env_sizes()
    manual = _compat.manual_mesh_axes()
    return tuple(a for a in axes if a in sizes and a not in manual)


def over_vmap_axes(axes: tuple, axis_index_groups, api: str, lax_collective):
    """A collective whose axes include jax.vmap axes: jax.lax's computation on the batch when
    they all are (lax_collective(axis_name)), refused like jax.lax refuses it otherwise."""
    if axis_index_groups is not None:
        raise NotImplementedError(f"jaccl.{api}: axis_index_groups over a jax.vmap axis is not "
                                  "supported (nor by jax.lax)")
    batch = vmap_axes(axes)
    if len(batch) != len(axes):
        raise NotImplementedError(
            f"jaccl.{api}: axis_name {axes!r} mixes jax.vmap axes {batch!r} with mesh axes; "
            "call it over each kind separately (jax.lax does not batch this either)")
    return lax_collective(batch[0] if len(batch) == 1 else batch)


class UnboundAxisError(NameError, AssertionError, ValueError):
    """An axis name no enclosing jax.shard_map (or jax.vmap) binds: jax.lax raises NameError
    outside shard_map and a bare AssertionError inside one (jax 0.10.2 to 0.12); jaccl always
    raised ValueError. Each catches it, and its message names the axis."""


# What jax.lax calls each op, for messages that read as jax.lax's.
LAX_NAMES = {"all_reduce": "psum", "reduce_scatter": "psum_scatter"}


def check_axes(axes: tuple, api: str) -> int:
    """Checks that `axes` are mesh axes of the enclosing shard_map; returns the group size."""
    sizes = _compat.axis_env_sizes()
    manual = _compat.manual_mesh_axes()
    for a in axes:
        if a in sizes and a not in manual:
            raise NotImplementedError(
                f"jaccl.{api}: axis {a!r} is a jax.vmap axis; jaccl collectives run over mesh axes "
                "of jax.shard_map (use jax.lax collectives over vmap axes)")
    missing = [a for a in axes if a not in sizes]
    if missing:
        bound = ", ".join(repr(a) for a in sizes) or "none"
        raise UnboundAxisError(
            f"Found an unbound axis name: {missing[0]}. To fix this, please call "
            f"{LAX_NAMES.get(api, api)} under `jax.shard_map`. (jaccl.{api}: axis "
            f"{missing[0]!r} is not a mesh axis of the enclosing jax.shard_map; bound axes: "
            f"{bound}; call it inside shard_map over a mesh with that axis)")
    return math.prod(sizes[a] for a in axes)


def check_dtype(dtype, api: str, op: str | None = None) -> None:
    dtype = np.dtype(dtype)
    if dtype not in SUPPORTED_DTYPES and dtype not in NARROW:
        names = ", ".join(str(d) for d in SUPPORTED_DTYPES + tuple(NARROW))
        raise TypeError(f"jaccl.{api}: dtype {dtype} is not supported (supported: {names})")
    if dtype == np.bool_ and op in ("sum", "prod"):
        raise TypeError(f"jaccl.{api}: op={op!r} on bool is not defined; use op='max' (any) or "
                        "op='min' (all), or cast to int32 first")
    if np.issubdtype(dtype, np.complexfloating) and op not in (None, "sum"):
        raise TypeError(f"jaccl.{api}: op={op!r} on {dtype} is not defined (complex numbers are "
                        "not ordered, and only sums of them are taken part by part); use op='sum'")


def _named(*names) -> tuple:
    """The dtypes of those of `names` this jax has."""
    return tuple(np.dtype(getattr(jax.numpy, n)) for n in names if hasattr(jax.numpy, n))


# Types narrower than the engine's, each with the type XLA:CPU's compiler widens it to around
# every collective it runs on it (a convert, the collective, a convert back: read off jax
# 0.12.1's compiled programs; tests/in_process/test_narrow_dtypes.py pins the bits). Their
# reductions run the same way here, so their bits are jax.lax's. An op that only moves elements
# (all_gather, all_to_all, ppermute) moves their bytes instead (sub-byte types two to a byte, as XLA packs them in memory): half
# (float8, int4) or a quarter (float4) of the bytes XLA moves. XLA's round trip is the identity
# but for NaNs, each of which it turns into its type's quiet NaN (NAN_AFTER_ROUND_TRIP), which
# is done here before the bytes move.
NARROW = {
    **{d: np.dtype(np.float16) for d in _named(
        "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz",
        "float8_e3m4", "float8_e4m3", "float4_e2m1fn")},
    **{d: np.dtype(np.float32) for d in _named("float8_e8m0fnu")},  # beyond float16's range
    **{d: np.dtype(np.int8) for d in _named("int4")},
    **{d: np.dtype(np.uint8) for d in _named("uint4")},
}
SUB_BYTE = _named("int4", "uint4", "float4_e2m1fn")  # 4 bits: XLA packs two to a byte
# Moved widened: where a ppermute sends nothing, jax.lax's result is the wide type's zero
# narrowed, which for a type without a zero is not the zero bytes the engine writes (a NaN).
WITHOUT_ZERO = _named("float8_e8m0fnu")
# The NaN XLA:CPU's round trip makes of any NaN of a type with several: its bits, and whether
# the NaN's sign stays (float8_e5m2's never does); jax 0.10.2 and 0.12.1 alike.
NAN_AFTER_ROUND_TRIP = {d: rule for names, rule in (
    (("float8_e5m2",), (0x7F, False)), (("float8_e4m3",), (0x7C, True)),
    (("float8_e3m4",), (0x78, True)), (("float8_e4m3fn",), (0x7F, True))) for d in _named(*names)}


def to_engine(x, *, reduces: bool, last_axis_pieces: int | None = 1):
    """`x` in a form the engine carries, and restore(result) that turns the op's result back:
    complex numbers as real pairs [..., 2] (the engine moves and sums parts); a NARROW type, for
    a reduction, widened as XLA:CPU widens it (jax.lax's bits); for an op that only moves
    elements, an 8-bit type as its bytes, a sub-byte type two to a byte along the last axis
    where the op keeps that axis last and cuts it into `last_axis_pieces` pieces of even length
    (None: it does not keep it last), else widened (as are types WITHOUT_ZERO); any other type as
    it is."""
    dtype = np.dtype(x.dtype)
    if np.issubdtype(dtype, np.complexfloating):
        pairs = jax.numpy.stack([jax.numpy.real(x), jax.numpy.imag(x)], axis=-1)
        return pairs, lambda y: jax.lax.complex(y[..., 0], y[..., 1])
    if dtype not in NARROW:
        return x, lambda y: y
    if reduces or dtype in WITHOUT_ZERO:
        # XLA:CPU rounds a value computed for its collective to the narrow type before widening
        # it; the barrier keeps XLA from dropping that rounding here (its excess precision would
        # widen the unrounded value).
        return jax.lax.optimization_barrier(x).astype(NARROW[dtype]), lambda y: y.astype(dtype)
    if dtype not in SUB_BYTE:
        bits = jax.lax.bitcast_convert_type(x, np.uint8)
        if dtype in NAN_AFTER_ROUND_TRIP:
            nan, keeps_sign = NAN_AFTER_ROUND_TRIP[dtype]
            sign = bits & np.uint8(0x80) if keeps_sign else np.uint8(0)
            bits = jax.numpy.where(jax.numpy.isnan(x), sign | np.uint8(nan), bits)
        return bits, lambda y: jax.lax.bitcast_convert_type(y, dtype)
    if last_axis_pieces is None or x.ndim == 0 or x.shape[-1] % (2 * last_axis_pieces):
        return jax.lax.optimization_barrier(x).astype(NARROW[dtype]), lambda y: y.astype(dtype)

    def unpack(y):
        return jax.lax.bitcast_convert_type(y, dtype).reshape(*y.shape[:-1], 2 * y.shape[-1])
    pairs = x.reshape(*x.shape[:-1], x.shape[-1] // 2, 2)
    return jax.lax.bitcast_convert_type(pairs, np.uint8), unpack


def move(op, x, last_axis_pieces: int | None = 1):
    """op(x in to_engine's form for an op that only moves elements), turned back. A narrow
    float type travels as its bytes, and a bitcast has no derivative in jax: there the tangent
    travels through the same op widened (NARROW's type, as XLA:CPU would move it), so jax.grad
    and jax.jvp see the op's own linear map. `op` must close over no traced values."""
    dtype = np.dtype(x.dtype)

    def moved(v):
        engine_form, restore = to_engine(v, reduces=False, last_axis_pieces=last_axis_pieces)
        return restore(op(engine_form))
    if dtype not in NARROW or not jax.numpy.issubdtype(dtype, jax.numpy.inexact):
        return moved(x)

    moved = jax.custom_jvp(moved)

    @moved.defjvp
    def _(primals, tangents):
        (v,), (t,) = primals, tangents
        return moved(v), op(t.astype(NARROW[dtype])).astype(t.dtype)
    return moved(x)


def check_choice(value, allowed, what: str, api: str) -> None:
    if value not in allowed:
        raise ValueError(f"jaccl.{api}: unknown {what} {value!r}; choose one of {', '.join(allowed)}")


def canonical_axis(axis: int, ndim: int, what: str, api: str) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"jaccl.{api}: {what}={axis} is out of range for an array of rank "
                         f"{ndim if ndim else 0}")
    return axis % ndim


def index_groups(axis_index_groups, size: int, api: str, uneven: bool = False):
    """jax.lax's axis_index_groups, checked against an axis (or axes) of `size`: a tuple of
    tuples of axis indices covering each index once, or None; equally sized unless `uneven`
    (jax.lax's reductions take groups of different sizes)."""
    if axis_index_groups is None:
        return None
    groups = tuple(tuple(int(i) for i in g) for g in axis_index_groups)
    flat = sorted(i for g in groups for i in g)
    if flat != list(range(len(flat))):
        raise ValueError("axis_index_groups must cover all indices exactly once")
    if len(flat) != size:
        raise ValueError(f"jaccl.{api}: axis_index_groups cover {len(flat)} indices, but the "
                         f"axes they index have {size}")
    if not uneven and len({len(g) for g in groups}) != 1:
        raise ValueError(f"jaccl.{api}: axis_index_groups must all be the same size, got sizes "
                         f"{[len(g) for g in groups]}")
    return groups


def _lowering_mesh(ctx):
    axis_context = ctx.module_context.axis_context
    mesh = getattr(axis_context, "mesh", None)
    mesh = _compat.concrete_mesh(mesh) if mesh is not None else None
    if mesh is None:
        raise ValueError(
            "jaccl: collectives must be lowered inside jax.shard_map over a concrete "
            "jax.sharding.Mesh (one with devices): pass mesh= to the outermost shard_map, or "
            "call the jitted function inside `with jax.set_mesh(mesh):`")
    return mesh


def one_device_program(ctx) -> bool:
    """Whether the program being lowered runs on one device (its mesh has one)."""
    return _lowering_mesh(ctx).size == 1


def in_mesh_order(ctx, axes: tuple) -> tuple:
    """`axes` ordered as the mesh being lowered for orders them."""
    names = list(_lowering_mesh(ctx).axis_names)
    return tuple(sorted(axes, key=names.index))


def group_processes(ctx, axes: tuple, groups=None) -> list:
    """The JAX process index of every member of each group of `axes` (cut by `groups`), in
    rank order."""
    table, _ = group_table(ctx, axes, groups)
    process_of = {d.id: d.process_index for d in _lowering_mesh(ctx).devices.flat}
    return [[process_of[int(d)] for d in row if d >= 0] for row in table]


def holds_runs_of_ranks(ctx, axes: tuple, groups=None) -> bool:
    """Whether every group of `axes` (cut by `groups`) is several processes each holding the
    same number (> 1) of consecutive ranks: the layout all_reduce's cascade algorithm takes,
    as the engine decides it (xla_ffi/comm/layouts.h)."""
    return all(_ext.engine.process_run(processes) > 0
               for processes in group_processes(ctx, axes, groups))


def spans_hosts_evenly(ctx, axes: tuple, groups=None) -> bool:
    """Whether every group of `axes` (cut by `groups`) spans several hosts with the same number
    (> 1) of ranks on each: the layout the hierarchical algorithms take, as the engine decides
    it (xla_ffi/comm/layouts.h)."""
    world = _bootstrap.init(_lowering_mesh(ctx).devices.flat)
    host_number = {h: i for i, h in enumerate(dict.fromkeys(world.hosts))}
    host_of = {p: host_number[h] for p, h in zip(world.members, world.hosts)}
    return all(_ext.engine.spans_hosts_evenly([host_of[p] for p in processes])
               for processes in group_processes(ctx, axes, groups))


def refuse_unfit_algorithm(op: str, algorithm: str, ctx, axes: tuple, groups=None) -> None:
    """A ValueError at trace time where `algorithm` needs a layout the groups of `axes` lack
    (the engine checks too, but a collective failing at run time stops the process's
    communication)."""
    if algorithm == "cascade" and not holds_runs_of_ranks(ctx, axes, groups):
        raise ValueError(
            f"jaccl.{op}: algorithm='cascade' needs every group to be several processes each "
            "holding the same number (> 1) of consecutive ranks (an axis over 2 processes x 2 "
            f"devices, say); the groups of {axes} are not: use algorithm='auto'")
    if algorithm == "hierarchical" and not spans_hosts_evenly(ctx, axes, groups):
        raise ValueError(
            f"jaccl.{op}: algorithm='hierarchical' needs every group to span several hosts with "
            "the same number (> 1) of ranks on each (an axis over 2 hosts x 2 processes, say); "
            f"the groups of {axes} do not: use algorithm='auto'")


def group_table(ctx, axes: tuple, groups=None) -> tuple[np.ndarray, int]:
    """The groups' device ids, one group per row in rank order; `groups` (axis_index_groups)
    cuts every row into the subgroups of those axis indices, each row padded with -1 to the
    largest (comm/communicator.h)."""
    mesh = _lowering_mesh(ctx)
    devices = mesh.devices
    names = list(mesh.axis_names)
    ids = np.vectorize(lambda d: d.id, otypes=[np.int64])(np.asarray(devices))
    collective = [names.index(a) for a in axes]
    others = [i for i in range(ids.ndim) if i not in collective]
    group_size = math.prod(ids.shape[i] for i in collective)
    table = np.transpose(ids, others + collective).reshape(-1, group_size)
    if groups is not None:
        group_size = max(len(g) for g in groups)
        table = np.stack([np.concatenate([row[list(g)], np.full(group_size - len(g), -1)])
                          for row in table for g in groups])
    return table, group_size


def widened_as_xla_cpu_reduces(rule):
    """A CPU lowering rule for a reducing collective that runs a bfloat16 operand as float32, as
    XLA:CPU runs its own all-reduce and reduce-scatter (its float normalization promotes their
    bfloat16 reductions). XLA then also removes the conversions next to computed values (excess
    precision, on by default): the engine sums what XLA computed before rounding it to bfloat16,
    and what follows reads the float32 sum, as around jax.lax.psum; a bfloat16 operand or result
    as it is converts exactly, and is rounded once, as before."""
    def widened(ctx, x, **params):
        aval_in, = ctx.avals_in
        if np.dtype(aval_in.dtype) != np.dtype(jax.numpy.bfloat16):
            return rule(ctx, x, **params)
        f32 = np.dtype(np.float32)
        wide = ctx.replace(avals_in=[aval_in.update(dtype=f32)],
                           avals_out=[a.update(dtype=f32) for a in ctx.avals_out])
        results = rule(wide, _compat.convert(ctx, x, wide.avals_in[0]), **params)
        if wide.tokens_out is not None:
            ctx.set_tokens_out(wide.tokens_out)
        return [_compat.convert(ctx, r, a) for a, r in zip(ctx.avals_out, results)]
    return widened


def lower_collective(ctx, *operands, target: str, axes: tuple, groups=None, aliases=None,
                     arrays=None, avals_in=None, **attributes):
    """Emits `target`(token, *operands) -> (token, *results) over the groups of `axes` (cut by
    axis_index_groups `groups`); `aliases` maps operand to result indices (not counting the
    token) that may share a buffer; `arrays` are int64 array attributes, `attributes` int64
    scalars; `avals_in` the operands' abstract values where they are not the primitive's."""
    _bootstrap.init(_lowering_mesh(ctx).devices.flat)  # over the mesh's processes after a loss
    table, group_size = group_table(ctx, axes, groups)
    config = {k: mlir.ir_attribute(np.int64(v)) for k, v in attributes.items()}
    for name, values in (arrays or {}).items():
        config[name] = ir.DenseI64ArrayAttr.get([int(v) for v in values])
    flat_table = [int(v) for v in table.ravel()]
    config["groups"] = ir.DenseI64ArrayAttr.get(flat_table)
    config["group_size"] = mlir.ir_attribute(np.int64(group_size))
    config["site"] = mlir.ir_attribute(np.int64(_call_site.site_of(ctx, target)))
    lane = _ordering.lane_of(ctx)
    config["lane"] = mlir.ir_attribute(np.int64(lane))  # xla_ffi/comm/lanes.h
    # the communicator's id, found once here (xla_ffi/comm/communicator.h): the call finds its
    # communicator by it
    comm = _ext.engine.communicator_id(flat_table, int(group_size), lane)
    config["comm"] = mlir.ir_attribute(np.uint64(comm).view(np.int64))
    token = _ordering.token_in(ctx)
    result_types = [token.type] + [_compat.ir_type(ctx, a) for a in ctx.avals_out]

    def emit(values, manual_sharding=None):
        op = _compat.custom_call(
            target, result_types=result_types, operands=values, backend_config=config,
            has_side_effect=True, api_version=4,
            operand_output_aliases={i + 1: o + 1 for i, o in (aliases or {}).items()})
        if manual_sharding is not None:
            op.attributes["mhlo.sharding"] = _compat.sharding_attr(ctx, manual_sharding)
        return list(op.results)

    if _compat.partly_manual(ctx):
        results = manual_region.in_fully_manual_region(
            ctx, [token, *operands], [_ordering.order_aval(ctx), *(avals_in or ctx.avals_in)],
            [_ordering.order_aval(ctx), *ctx.avals_out], emit)
    else:
        results = emit([token, *operands])
    _ordering.token_out(ctx, results[0])
    return results[1:]


def collective_effects(axes: tuple) -> set:
    return _ordering.effects_for(axes)


def refuse_vmap_axis(axis_data, axes: tuple, api: str) -> None:
    if getattr(axis_data, "name", None) in axes:
        raise NotImplementedError(
            f"jaccl.{api}: axis {axis_data.name!r} is a jax.vmap axis; jaccl collectives run over "
            "mesh axes of jax.shard_map (use jax.lax collectives over vmap axes)")


