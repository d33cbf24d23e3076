"""The ordering effect every jaccl collective carries.

Each device runs its program's collectives in one fixed order, or the ranks of a group would
meet in different collectives. XLA:CPU runs independent custom calls in whatever order they
become ready, which differs between devices, so data dependencies must fix the order: the
effect is an *ordered* JAX effect, and JAX threads a token through every op that has it (in
program order, through control flow and shard_map). The custom call takes the token and
returns the next one.
"""

from __future__ import annotations

from jax._src import effects


class CollectiveOrderEffect(effects.Effect):
    __str__ = __repr__ = lambda self: "JacclCollectiveOrder"  # noqa: E731


collective_order = CollectiveOrderEffect()

for _set in (effects.ordered_effects, effects.shardable_ordered_effects, effects.lowerable_effects,
             effects.control_flow_allowed_effects, effects.custom_derivatives_allowed_effects,
             effects.remat_allowed_effects):
    _set.add_type(CollectiveOrderEffect)
