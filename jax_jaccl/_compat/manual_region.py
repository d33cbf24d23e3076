"""jaccl's custom calls inside a shard_map that is manual over only some mesh axes.

Contract: in_fully_manual_region(ctx, operands, avals_in, avals_out, emit) emits
`emit(inner_operands) -> inner_results` inside a region that is manual over every mesh axis
and returns the region's results (one per entry of avals_out). Operands enter replicated over
the axes the enclosing shard_map left to XLA (XLA gathers them if its partitioner had split
them), and the results leave replicated over those axes.

Why: XLA's partitioner must know how to run an op on the devices of an automatic axis. A
side-effecting custom call (every jaccl collective is one) that it is asked to replicate
stops compilation ("Side-effect ops cannot be replicated"), and one without a sharding aborts
the process. Inside a fully manual region each device simply runs the call on its own
buffers, which is what a jaccl collective is: the group of a device is fixed by its
coordinates on every mesh axis (the automatic ones included), so each replica along an
automatic axis reduces with the members of its own group, and all compute the same result.
This is what a nested jax.shard_map over the remaining axes with in_specs=P() and
out_specs=P() would lower to; emitted here at lowering time because only the lowering knows
the concrete mesh. It is what jax's own shard_map lowering emits: an sdy.manual_computation under
Shardy, and under GSPMD the SPMDFullToShardShape / SPMDShardToFullShape pair on a jax that has
pxla.manual_proto (jax <= 0.12.0); from jax 0.12.1 jax emits the sdy.manual_computation under
either partitioner (XLA converts it for GSPMD), and so does this module.

Part of _compat: this module reads jax internals (jax._src).
"""

from __future__ import annotations

import jax.interpreters.mlir
from jax._src import config, core, sharding_impls
from jax._src.interpreters import mlir
from jax._src.interpreters import pxla
from jax._src.lib import xla_client as xc
from jax._src.lib.mlir.dialects import hlo, sdy
from jax.interpreters.mlir import ir
from jax.sharding import NamedSharding, PartitionSpec


def in_fully_manual_region(ctx, operands, avals_in, avals_out, emit):
    axis_context = ctx.module_context.axis_context
    mesh = axis_context.mesh
    manual = frozenset(axis_context.manual_axes)
    remaining = [a for a in mesh.axis_names if a not in manual]
    if config.use_shardy_partitioner.value or not gspmd_regions_by_hand():
        return _shardy_region(ctx, mesh, remaining, operands, avals_in, avals_out, emit)
    return _gspmd_region(ctx, mesh, manual, operands, avals_in, avals_out, emit)


def gspmd_regions_by_hand() -> bool:
    """Whether this jax's shard_map lowers under GSPMD to sharding custom calls it builds with
    pxla.manual_proto (jax <= 0.12.0), rather than to an sdy.manual_computation (0.12.1)."""
    return hasattr(pxla, "manual_proto")


def _ndim(aval) -> int:
    return getattr(aval, "ndim", 0)  # a token (core.abstract_token) has no dimensions


def _ir_type(ctx, aval):
    if aval is core.abstract_token:
        return hlo.TokenType.get()
    return jax.interpreters.mlir.aval_to_ir_type(ctx.module_context, aval)


def _replicated_sdy(ctx, mesh, avals):
    arrays = [NamedSharding(mesh, PartitionSpec())._to_sdy_sharding(_ndim(a)) for a in avals]
    return sharding_impls.SdyArrayList(tuple(arrays)).build(ctx.module_context.sharding_attr_cache)


def _shardy_region(ctx, mesh, remaining, operands, avals_in, avals_out, emit):
    result_types = [_ir_type(ctx, a) for a in avals_out]
    region = sdy.ManualComputationOp(
        result_types, list(operands), _replicated_sdy(ctx, mesh, avals_in),
        _replicated_sdy(ctx, mesh, avals_out),
        sdy.ManualAxesAttr.get([ir.StringAttr.get(a) for a in remaining]))
    block = ir.Block.create_at_start(region.body, [v.type for v in operands])
    with ir.InsertionPoint(block):
        sdy.return_(list(emit(list(block.arguments))))
    return list(region.results)


def _gspmd_region(ctx, mesh, manual, operands, avals_in, avals_out, emit):
    everything = frozenset(mesh.axis_names)

    def enter(value, aval):
        partly = mlir.wrap_with_sharding_op(ctx, value, aval, pxla.manual_proto(aval, manual, mesh))
        return mlir.wrap_with_full_to_shard_op(ctx, partly, aval,
                                               pxla.manual_proto(aval, everything, mesh))

    def leave(value, aval):
        fully = mlir.wrap_with_sharding_op(ctx, value, aval,
                                           pxla.manual_proto(aval, everything, mesh))
        return mlir.wrap_with_shard_to_full_op(ctx, fully, aval,
                                               pxla.manual_proto(aval, manual, mesh))

    inner = [enter(v, a) for v, a in zip(operands, avals_in)]
    results = emit(inner, manual_sharding=_manual_tuple(len(avals_out)))
    return [leave(v, a) for v, a in zip(results, avals_out)]


def _manual_tuple(n: int) -> xc.OpSharding:
    """A tuple sharding, every element manual: what GSPMD needs on a side-effecting op."""
    element = xc.OpSharding()
    element.type = xc.OpSharding.Type.MANUAL
    sharding = xc.OpSharding()
    sharding.type = xc.OpSharding.Type.TUPLE
    sharding.tuple_shardings = [element] * n
    return sharding
