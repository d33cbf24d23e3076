"""Where every (token, expert) row of an expert-parallel MoE layer goes, in static shapes.

Contract: route() runs inside shard_map on each device of a group of R ranks, with
topk_idx [T, K] int32 (-1 = not routed) and E experts split contiguously (expert e lives on
rank e // E_loc). It all-gathers the per-expert counts ([R, E], the only communication) and
returns a Routing of int32 arrays every rank derives consistently:

- rows inside an expert are ordered by (source rank, source token); the rows of expert e from
  rank s take slots base[s, e] .. base[s, e] + counts[s, e), base = exclusive prefix over ranks;
  slots >= capacity are dropped (so the largest (rank, token) go first);
- send_slot [T, K]: the slot of each pair in its expert's buffer, -1 if masked or dropped;
- send lists (pair and token of every kept pair, grouped by destination rank, experts then
  tokens ascending) and receive lists (rows j * capacity + slot of this rank's buffers,
  grouped by source rank in the same order): what moe/moe.h streams;
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
    """capacity None: dropless (receive_rows_dropless); otherwise rows j * C + slot."""
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

    # This rank's pairs in send order: expert ascending, then token (then k for duplicates).
    pair = jnp.arange(P, dtype=i32)
    token = pair // K
    key = jnp.where(valid, expert * T + token, E * T + pair)
    order = jnp.argsort(key, stable=True).astype(i32)
    e_sorted = expert[order]
    # first sorted position of each expert (E: the unrouted pairs at the end)
    start = jnp.concatenate([jnp.zeros((1,), i32), jnp.cumsum(counts_local).astype(i32)])
    position = jnp.arange(P, dtype=i32) - start[e_sorted]
    slot_sorted = base[me, jnp.minimum(e_sorted, E - 1)] + position
    kept_sorted = (e_sorted < E) & (slot_sorted < C)
    send_slot = jnp.full((P,), -1, i32).at[order].set(jnp.where(kept_sorted, slot_sorted, -1))

    compact = jnp.argsort(jnp.where(kept_sorted, pair, P + pair), stable=True)
    send_pairs = order[compact]
    send_tokens = send_pairs // K
    kept_to_rank = kept_e[me].reshape(R, E_loc).sum(axis=1)
    send_offsets = jnp.concatenate([jnp.zeros((1,), i32), jnp.cumsum(kept_to_rank).astype(i32)])

    # Receive side: rows (j, c) of this rank's experts, ordered by (source rank, j, c).
    local = me * E_loc + jnp.arange(E_loc, dtype=i32)         # global ids of local experts
    mine_base = base[:, local]                                # [R, E_loc]
    mine_kept = kept_e[:, local]
    recv_count = mine_kept.sum(axis=0).astype(i32)
    dropped = (counts[:, local].sum(axis=0) - recv_count).astype(i32)
    from_rank = mine_kept.sum(axis=1)
    recv_offsets = jnp.concatenate([jnp.zeros((1,), i32), jnp.cumsum(from_rank).astype(i32)])
    if capacity is None:
        recv_rows = receive_rows_dropless(mine_kept, mine_base, recv_count, C)
    else:
        recv_rows = receive_rows(mine_base, recv_count, R, C)

    return Routing(counts, send_slot.reshape(T, K), send_pairs.astype(i32),
                   send_tokens.astype(i32), send_offsets, recv_rows, recv_offsets, recv_count,
                   dropped)


def receive_rows(base, recv_count, R, C):
    """Capacity layout's receive list: rows j * C + c of the local experts' [E_loc, C] buffers,
    ordered by (source rank, j, c); base [R, E_loc] is each rank's first slot in each expert."""
    i32 = jnp.int32
    E_loc = recv_count.shape[0]
    c = jnp.arange(C, dtype=i32)
    # source of slot (j, c): the last rank whose first slot is <= c
    source = jnp.sum(base[:, :, None] <= c[None, None, :], axis=0) - 1  # [E_loc, C]
    slot_ok = c[None, :] < recv_count[:, None]
    row = jnp.arange(E_loc, dtype=i32)[:, None] * C + c[None, :]
    recv_key = jnp.where(slot_ok, source * (E_loc * C) + row, R * E_loc * C + row)
    return jnp.argsort(recv_key.reshape(-1), stable=True).astype(i32)


def receive_rows_dropless(kept, base, recv_count, rows):
    """Dropless receive list: kept [R, E_loc] rows arriving from each rank for each local
    expert, base [R, E_loc] their first slot in the expert's group. The output holds the
    groups one after another (expert j's rows at group_start[j] .. + recv_count[j]), so
    position p of the list (arrivals in (source rank, j, slot) order) is row
    group_start[j] + base[s, j] + c, with (s, j, c) found by a search over the
    running totals; positions past the arrivals are never read (row 0)."""
    i32 = jnp.int32
    R, E_loc = kept.shape
    group_start = exclusive_cumsum(recv_count, 0)              # [E_loc]
    ends = jnp.cumsum(kept.reshape(-1)).astype(i32)           # [R * E_loc], (s, j) order
    p = jnp.arange(rows, dtype=i32)
    f = jnp.searchsorted(ends, p, side="right").astype(i32)   # (s, j) of arrival p
    ok = f < R * E_loc
    f = jnp.minimum(f, R * E_loc - 1)
    s, j = f // E_loc, f % E_loc
    c = p - (ends[f] - kept.reshape(-1)[f])
    return jnp.where(ok, group_start[j] + base[s, j] + c, 0).astype(i32)
