"""How every device runs its jaccl collectives in one order.

The ranks of a group must meet in the same collective, so every device has to run a program's
collectives in program order. XLA:CPU runs independent custom calls in whatever order they
become ready (concurrently once buffers are large), and that order differs between devices,
so data dependencies must fix it: each collective's custom call takes a token and returns the
next one.

Two ways to thread the token:
- default: one chain per MLIR block, made here at lowering time. The program keeps no JAX
  effect, so jit keeps its fast C++ dispatch path (~10 us a call instead of ~100 us). Chains
  in different blocks (a loop body, a cond branch, a nested jit) are not ordered against each
  other, and devices may run such collectives in different orders, even at once: each chain
  therefore has a *lane* (lane_of()), and the lanes of a device run their calls independently
  (xla_ffi/comm/lanes.h), so every rank gets both results whatever order it takes them in.
  The first chain lowered in a module has lane 0, the next lane 1, and so on, wrapping at
  JACCL_LANES; the blocks of one operation (the branches of a cond) share a lane, since only
  one of them runs. Chains that share a lane are ordered by each device's threads only: when
  devices take them in different orders, the engine stops with a "ranks disagree" error
  naming both collectives (by kind, shape, type, op and the line that wrote them:
  _call_site.py; two calls of one site, such as a function called twice, are told apart by
  their order only).
- JACCL_STRICT_ORDER=1: a JAX *ordered* effect; JAX threads the token through the whole
  program, control flow and nested functions included, at the price of the slow dispatch path.

Inside a shard_map that is manual over only some mesh axes XLA's partitioner cannot place a
token (it gives it a tiled sharding and aborts the process), so there the chain is an int32
scalar instead: an ordinary value the handlers pass along untouched, which orders the calls by
data dependency just as a token does.
"""

from __future__ import annotations

import weakref

import jax
import numpy as np
from jax.interpreters import mlir

from . import _compat, _settings
from ._compat import effects


class CollectiveOrderEffect(effects.Effect):
    __str__ = __repr__ = lambda self: "JacclCollectiveOrder"  # noqa: E731


collective_order = CollectiveOrderEffect()

for _set in (effects.ordered_effects, effects.shardable_ordered_effects, effects.lowerable_effects,
             effects.control_flow_allowed_effects, effects.custom_derivatives_allowed_effects,
             effects.remat_allowed_effects):
    _set.add_type(CollectiveOrderEffect)


_compat.refuse_in_partly_manual(collective_order, (
    "jaccl: JACCL_STRICT_ORDER=1 orders collectives with a JAX token, which XLA cannot carry "
    "through a shard_map that is manual over only some mesh axes, and this one contains a "
    "shard_map manual over all of them with jaccl collectives inside. Unset JACCL_STRICT_ORDER "
    "(each block's collectives are then ordered by data dependency), or make the outer "
    "shard_map manual over every mesh axis"))


def strict() -> bool:
    return _settings.current().strict_order


def effects_for(axes: tuple) -> set:
    """The effects of a collective over `axes`: the named axes, plus the order in strict mode
    (except inside a partly manual shard_map, where XLA cannot place JAX's token: there the
    calls are ordered by the per-block chain of the default mode)."""
    named = {_compat.NamedAxisEffect(a) for a in axes}
    if strict() and not _compat.tracing_partly_manual():
        return named | {collective_order}
    return named


# module -> {block -> last token}: the per-block chains of the default mode.
_chains: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


# module -> {operation owning a block with jaccl calls -> its lane}
_lanes: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def lane_of(ctx) -> int:
    """The lane of the jaccl call being lowered in `ctx`: that of its block's chain (see the
    module's docstring); 0 in strict mode, where one token orders every call."""
    lanes = _settings.current().lanes
    if lanes == 1 or collective_order in ctx.tokens_in.effects():
        return 0
    owner = _compat.current_block().owner.operation
    numbered = _lanes.setdefault(ctx.module_context.module, {})
    if owner not in numbered:
        numbered[owner] = len(numbered) % lanes
    return numbered[owner]


def token_in(ctx):
    """The value that orders the next jaccl call of this block: a token, or an int32 scalar
    where the shard_map is partly manual (see the module's docstring)."""
    if collective_order in ctx.tokens_in.effects():
        return ctx.tokens_in.get(collective_order)
    chain = _chains.setdefault(ctx.module_context.module, {})
    block = _compat.current_block()
    token = chain.get(block)
    if token is not None:
        return token
    if _compat.partly_manual(ctx):
        return mlir.ir_constant(np.int32(0))
    return _compat.create_token()


# The abstract value of the int32 chain of partly manual shard_maps.
ORDER_WORD = jax.core.ShapedArray((), np.int32)


def order_aval(ctx):
    """The abstract value of what token_in(ctx) returns: JAX's token in strict mode, else the
    int32 word (only asked for inside partly manual shard_maps)."""
    if collective_order in ctx.tokens_in.effects():
        return _compat.abstract_token()
    return ORDER_WORD


def token_out(ctx, token) -> None:
    if collective_order in ctx.tokens_in.effects():
        ctx.set_tokens_out(_compat.token_set({collective_order: token}))
    else:
        _chains.setdefault(ctx.module_context.module, {})[_compat.current_block()] = token
