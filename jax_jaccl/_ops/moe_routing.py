"""Where every (token, expert) row of an expert-parallel MoE layer goes, in static shapes.

Contract: route() runs inside shard_map on each device of a group of R ranks, with
topk_idx [T, K] int32 (-1 = not routed) and E experts split contiguously (expert e lives on
rank e // E_loc). It all-gathers the per-expert counts ([R, E]), then every pair's destination
rank and row there ([R, 2 T K]: a receiver lists its rows in its senders' order), its only
communication, and returns a Routing of int32 arrays every rank derives consistently:

- rows inside an expert are ordered by (source rank, source token); the rows of expert e from
  rank s take slots base[s, e] .. base[s, e] + counts[s, e), base = exclusive prefix over ranks;
  slots >= capacity are dropped (so the largest (rank, token) go first);
- send_slot [T, K]: the slot of each pair in its expert's buffer, -1 if masked or dropped;
- send lists (pair and token of every kept pair, grouped by destination rank, then in pair
  order: token, then k) and receive lists (rows j * capacity + slot of this rank's buffers,
  grouped by source rank in the same order): what moe/moe.h streams. A combine's stream
  thus brings a rank its rows token by token, which lets it sum them as they come;
- recv_count [E_loc] (valid rows per local expert) and dropped [E_loc].

capacity=None routes dropless: no slot limit, and the receive rows pack the local experts'
groups one after another in a buffer of T * K * R rows (the most that can arrive: every
pair of every rank), the layout jax.lax.ragged_dot takes with recv_count as group sizes.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax


class Routing(NamedTuple):
    counts: jax.Array        # [R, E] rows routed by each rank to each expert (before capacity)
    send_slot: jax.Array     # [T, K]
    send_pairs: jax.Array    # [T*K] pair ids (t * K + k), kept pairs first, by destination
    send_tokens: jax.Array   # [T*K] their tokens
    send_offsets: jax.Array  # [R + 1]
    recv_rows: jax.Array     # [E_loc * C] rows j * C + slot, by source rank
    recv_offsets: jax.Array  # [R + 1]
    recv_count: jax.Array    # [E_loc]
    dropped: jax.Array       # [E_loc]


def exclusive_cumsum(x, axis):
    return jnp.cumsum(x, axis=axis) - x


def route(topk_idx, *, num_experts: int, capacity, ranks: int, axis_name, all_gather):
    """capacity None: dropless (rows of the experts' groups one after another); otherwise rows
    j * C + slot."""
    T, K = topk_idx.shape
    E, R = num_experts, ranks
    C = T * K * R if capacity is None else capacity          # dropless: no expert overflows
    E_loc = E // R
    P = T * K
    i32 = jnp.int32
    me = lax.axis_index(axis_name).astype(i32)

    flat = topk_idx.reshape(P).astype(i32)
    valid = (flat >= 0) & (flat < E)
    expert = jnp.where(valid, flat, E)                       # E: nowhere
    counts_local = jnp.zeros((E + 1,), i32).at[expert].add(1)[:E]
    counts = all_gather(counts_local, axis_name).reshape(R, E).astype(i32)
    base = exclusive_cumsum(counts, 0)                       # [R, E]
    kept_e = jnp.clip(C - base, 0, counts)                   # [R, E] rows that fit

    # Slots: each pair's rank among this rank's pairs of its expert, in pair order (token,
    # then k), after the lower ranks' rows of that expert.
    pair = jnp.arange(P, dtype=i32)
    key = jnp.where(valid, expert * P + pair, E * P + pair)
    order = jnp.argsort(key, stable=True).astype(i32)
    e_sorted = expert[order]
    # first sorted position of each expert (E: the unrouted pairs at the end)
    start = jnp.concatenate([jnp.zeros((1,), i32), jnp.cumsum(counts_local).astype(i32)])
    position = jnp.arange(P, dtype=i32) - start[e_sorted]
    slot_sorted = base[me, jnp.minimum(e_sorted, E - 1)] + position
    kept_sorted = (e_sorted < E) & (slot_sorted < C)
    send_slot = jnp.full((P,), -1, i32).at[order].set(jnp.where(kept_sorted, slot_sorted, -1))
    kept = send_slot >= 0

    # Send lists: kept pairs by destination rank, then pair.
    dest = jnp.where(kept, expert // E_loc, R)
    send_pairs = jnp.argsort(dest * P + pair, stable=True).astype(i32)
    send_tokens = send_pairs // K
    kept_to_rank = kept_e[me].reshape(R, E_loc).sum(axis=1)
    send_offsets = jnp.concatenate([jnp.zeros((1,), i32), jnp.cumsum(kept_to_rank).astype(i32)])

    # The row each kept pair takes at its destination: j * C + slot in the [E_loc, C] buffers
    # (j: the expert's index there), or dropless the start of expert j's group (the groups one
    # after another) + slot. A second all_gather hands every rank its senders' rows in their
    # pair order.
    e = jnp.minimum(expert, E - 1)
    if capacity is None:
        groups = exclusive_cumsum(kept_e.sum(axis=0).reshape(R, E_loc), 1).reshape(E)
        row = groups[e] + send_slot
    else:
        row = (e % E_loc) * C + send_slot
    placed = all_gather(jnp.concatenate([dest, jnp.where(kept, row, 0)]), axis_name)
    placed = placed.reshape(R, 2 * P).astype(i32)

    # Receive side: this rank's experts' rows by (source rank, source pair).
    local = me * E_loc + jnp.arange(E_loc, dtype=i32)         # global ids of local experts
    mine_kept = kept_e[:, local]
    recv_count = mine_kept.sum(axis=0).astype(i32)
    dropped = (counts[:, local].sum(axis=0) - recv_count).astype(i32)
    from_rank = mine_kept.sum(axis=1)
    recv_offsets = jnp.concatenate([jnp.zeros((1,), i32), jnp.cumsum(from_rank).astype(i32)])
    recv_rows = receive_rows(placed[:, :P] == me, placed[:, P:],
                             C if capacity is None else E_loc * C)

    return Routing(counts, send_slot.reshape(T, K), send_pairs, send_tokens.astype(i32),
                   send_offsets, recv_rows, recv_offsets, recv_count, dropped)


def receive_rows(mine, rows, n):
    """The receive list, n entries: the rows of the pairs that are `mine` ([R, P]: every sender's
    pairs that come to this rank), in (sender, pair) order; entries past them are 0 (never
    read)."""
    i32 = jnp.int32
    mine, rows = mine.reshape(-1), rows.reshape(-1)
    at = jnp.where(mine, exclusive_cumsum(mine.astype(i32), 0), n)
    return jnp.zeros((n + 1,), i32).at[at].set(jnp.where(mine, rows, 0))[:n]
