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
  other; when such collectives have no data dependency and devices run them in different
  orders, the engine stops with a "ranks disagree" error naming both collectives.
- JACCL_STRICT_ORDER=1: a JAX *ordered* effect; JAX threads the token through the whole
  program, control flow and nested functions included, at the price of the slow dispatch path.
"""

from __future__ import annotations

import os
import weakref

from jax._src import effects

from . import _compat


class CollectiveOrderEffect(effects.Effect):
    __str__ = __repr__ = lambda self: "JacclCollectiveOrder"  # noqa: E731


collective_order = CollectiveOrderEffect()

for _set in (effects.ordered_effects, effects.shardable_ordered_effects, effects.lowerable_effects,
             effects.control_flow_allowed_effects, effects.custom_derivatives_allowed_effects,
             effects.remat_allowed_effects):
    _set.add_type(CollectiveOrderEffect)


def strict() -> bool:
    return os.environ.get("JACCL_STRICT_ORDER", "0") not in ("", "0", "false", "False")


def effects_for(axes: tuple) -> set:
    """The effects of a collective over `axes` (the named axes, plus the order in strict mode)."""
    named = {_compat.NamedAxisEffect(a) for a in axes}
    return named | {collective_order} if strict() else named


# module -> {block -> last token}: the per-block chains of the default mode.
_chains: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def token_in(ctx):
    if collective_order in ctx.tokens_in.effects():
        return ctx.tokens_in.get(collective_order)
    chain = _chains.setdefault(ctx.module_context.module, {})
    block = _compat.current_block()
    token = chain.get(block)
    return token if token is not None else _compat.create_token()


def token_out(ctx, token) -> None:
    if collective_order in ctx.tokens_in.effects():
        ctx.set_tokens_out(_compat.token_set({collective_order: token}))
    else:
        _chains.setdefault(ctx.module_context.module, {})[_compat.current_block()] = token
