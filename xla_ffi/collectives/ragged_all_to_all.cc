// ragged_all_to_all (jax.lax semantics): rank r sends rows [input_offsets[i], + send_sizes[i])
// of its operand to rank i / k (k slices per rank), which writes them at row
// output_offsets[i] of its output (the offset is the sender's to choose); recv_sizes[i] rows
// arrive from rank i / k. Only the rows that exist travel.
//
// Schedule: two phases.
// 1. Placement: every rank sends every peer the numbers that peer cannot know, how many rows
//    each of its k slices has and where it goes (send_sizes, output_offsets), all pairs at
//    once. Each rank checks them against its own recv_sizes (a disagreement names both
//    ranks), its output's bounds, and that no two slices overlap, before any row moves.
// 2. Rows: a stream per slice with rows, read from and written to the row ranges in place
//    (no staging); a pair's slices share its channel, interleaved chunk by chunk, listed in
//    slice order at both ends. The slices a rank sends itself are local copies. Rows of the
//    output that nothing arrives at keep the value the output operand gave them (or, when the
//    output operand was zeros that the lowering left out, are zeroed here).
#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/streams.h"
#include "collectives/waiter.h"
#include "common/error.h"
#include "common/memory.h"

namespace jaccl {
namespace {

// What every rank announced for this one (phase 1): from[q * k + j] is slice j of rank q.
std::vector<RaggedPlacement> exchange_placements(const Call& call, const RaggedRows& g) {
  const int n = call.member->size, r = call.member->rank, k = g.slices_per_rank;
  std::vector<int64_t> mine(2 * n * k), theirs(2 * n * k);
  for (int i = 0; i < n * k; ++i) {
    mine[2 * i] = g.send_sizes[i];
    mine[2 * i + 1] = g.output_offsets[i];
  }
  std::copy(mine.begin() + 2 * r * k, mine.begin() + 2 * (r + 1) * k, theirs.begin() + 2 * r * k);
  Call meta = call;  // the same call, carrying int64 pairs
  meta.dtype = Dtype::kI64;
  meta.op = ReduceOp::kSum;
  meta.op_count = static_cast<uint64_t>(2 * n * k);
  const size_t per_pair = 2 * static_cast<size_t>(k);
  Phase phase;
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    Task send;
    send.count = per_pair;
    send.srcs = {Endpoint::local(Region::contiguous(mine.data(), 8, per_pair, q * per_pair),
                                 Dtype::kI64)};
    send.sinks = {send_to(meta, q, stream_tag(1, 0, r), Dtype::kI64)};
    phase.push_back(std::move(send));
    Task store;
    store.count = per_pair;
    store.srcs = {receive_from(meta, q, stream_tag(1, 0, q), Dtype::kI64)};
    store.sinks = {Endpoint::local(Region::contiguous(theirs.data(), 8, per_pair, q * per_pair),
                                   Dtype::kI64)};
    phase.push_back(std::move(store));
  }
  std::vector<Phase> phases{std::move(phase)};
  run_phases(meta, phases);
  // Rank q's entry for this rank's slice j sits at q's index r * k + j.
  std::vector<RaggedPlacement> from(n * k);
  for (int q = 0; q < n; ++q) {
    for (int j = 0; j < k; ++j) {
      const size_t at = 2 * (static_cast<size_t>(q) * k + j);
      from[q * k + j] = RaggedPlacement{theirs[at + 1], theirs[at]};
    }
  }
  return from;
}

}  // namespace

// The rows announced must be the rows expected, inside the output, and disjoint.
void check_ragged_placements(const Call& call, const Buffers& b,
                             const std::vector<RaggedPlacement>& from) {
  const RaggedRows& mine = b.ragged_rows;
  const int r = call.member->rank, k = mine.slices_per_rank;
  const int64_t out_rows = static_cast<int64_t>(b.out_rows);
  std::vector<int> order;
  for (int i = 0; i < static_cast<int>(from.size()); ++i) {
    const RaggedPlacement& p = from[i];
    const int q = i / k;
    if (p.rows != mine.recv_sizes[i]) {
      throw_error(ErrorKind::kMismatch, "ranks disagree: ", describe_rank(call, r),
                  " expects recv_sizes[", i, "] = ", mine.recv_sizes[i], " rows from ",
                  describe_rank(call, q), ", which sends send_sizes[", r * k + i % k, "] = ",
                  p.rows, " in ragged_all_to_all #", call.seq);
    }
    if (p.offset < 0 || p.offset > out_rows || p.rows > out_rows - p.offset) {
      throw_error(ErrorKind::kInvalidArgument, "ragged_all_to_all: ", describe_rank(call, q),
                  " writes rows [", p.offset, ", ", p.offset + p.rows, ") of the output of ",
                  describe_rank(call, r), ", which has ", out_rows, " rows (its output_offsets[",
                  r * k + i % k, "] is out of bounds)");
    }
    if (p.rows > 0) order.push_back(i);
  }
  std::sort(order.begin(), order.end(),
            [&](int a, int c) { return from[a].offset < from[c].offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const RaggedPlacement &a = from[order[i - 1]], &c = from[order[i]];
    if (a.offset + a.rows > c.offset) {
      throw_error(ErrorKind::kInvalidArgument, "ragged_all_to_all: slices ", order[i - 1],
                  " (from ", describe_rank(call, order[i - 1] / k), ") and ", order[i], " (from ",
                  describe_rank(call, order[i] / k), ") overlap in the output of ",
                  describe_rank(call, r), ": rows [", a.offset, ", ", a.offset + a.rows,
                  ") and [", c.offset, ", ", c.offset + c.rows, ")");
    }
  }
}

void zero_unwritten_rows(const Buffers& b, Dtype dtype, const std::vector<RaggedPlacement>& from) {
  std::vector<RaggedPlacement> written;
  for (const RaggedPlacement& p : from) {
    if (p.rows > 0) written.push_back(p);
  }
  std::sort(written.begin(), written.end(),
            [](const RaggedPlacement& a, const RaggedPlacement& c) { return a.offset < c.offset; });
  const size_t row_bytes = b.row_elems * dtype_size(dtype);
  char* out = static_cast<char*>(b.out);
  size_t row = 0;
  auto zero = [&](size_t end) {
    if (end > row) zero_fill(out + row * row_bytes, (end - row) * row_bytes);
  };
  for (const RaggedPlacement& p : written) {
    zero(static_cast<size_t>(p.offset));
    row = static_cast<size_t>(p.offset + p.rows);
  }
  zero(b.out_rows);
}

void check_ragged_rows(const Call& call, const Buffers& b) {
  const RaggedRows& g = b.ragged_rows;
  const int entries = call.member->size * g.slices_per_rank;
  const int64_t in_rows = static_cast<int64_t>(b.in_rows);
  for (int i = 0; i < entries; ++i) {
    if (g.send_sizes[i] < 0 || g.recv_sizes[i] < 0) {
      throw_error(ErrorKind::kInvalidArgument, "ragged_all_to_all: send_sizes[", i, "] = ",
                  g.send_sizes[i], " and recv_sizes[", i, "] = ", g.recv_sizes[i],
                  " must not be negative");
    }
    if (g.input_offsets[i] < 0 || g.input_offsets[i] > in_rows ||
        g.send_sizes[i] > in_rows - g.input_offsets[i]) {
      throw_error(ErrorKind::kInvalidArgument, "ragged_all_to_all: input_offsets[", i, "] = ",
                  g.input_offsets[i], " with send_sizes[", i, "] = ", g.send_sizes[i],
                  " reads past the operand's ", in_rows, " rows");
    }
    if (g.output_offsets[i] < 0) {
      throw_error(ErrorKind::kInvalidArgument, "ragged_all_to_all: output_offsets[", i,
                  "] = ", g.output_offsets[i], " is negative");
    }
  }
}

void ragged_all_to_all(Call& call, const Buffers& b) {
  check_ragged_rows(call, b);
  const int n = call.member->size, r = call.member->rank;
  const RaggedRows& g = b.ragged_rows;
  const int k = g.slices_per_rank;
  const std::vector<RaggedPlacement> from = exchange_placements(call, g);
  check_ragged_placements(call, b, from);
  if (b.zero_unwritten) zero_unwritten_rows(b, call.dtype, from);
  const Dtype elem = call.dtype;
  const size_t esize = dtype_size(elem), h = b.row_elems;
  auto in_range = [&](int64_t first, int64_t count) {
    return Endpoint::local(Region::contiguous(b.in, esize, static_cast<size_t>(count) * h,
                                              static_cast<size_t>(first) * h), elem);
  };
  auto out_range = [&](const RaggedPlacement& p) {
    return Endpoint::local(Region::contiguous(b.out, esize, static_cast<size_t>(p.rows) * h,
                                              static_cast<size_t>(p.offset) * h), elem);
  };
  Phase phase;
  for (int q = 0; q < n; ++q) {
    for (int j = 0; j < k; ++j) {
      const int i = q * k + j;  // this rank's slice for q, and q's slice for this rank
      if (q == r) {
        if (g.send_sizes[i] == 0) continue;
        Task keep;
        keep.count = static_cast<size_t>(g.send_sizes[i]) * h;
        keep.srcs = {in_range(g.input_offsets[i], g.send_sizes[i])};
        keep.sinks = {out_range(from[i])};
        phase.push_back(std::move(keep));
        continue;
      }
      if (g.send_sizes[i] > 0) {
        Task send;
        send.count = static_cast<size_t>(g.send_sizes[i]) * h;
        send.srcs = {in_range(g.input_offsets[i], g.send_sizes[i])};
        send.sinks = {send_to(call, q, stream_tag(2, j, r), elem)};
        phase.push_back(std::move(send));
      }
      if (from[i].rows > 0) {
        Task store;
        store.count = static_cast<size_t>(from[i].rows) * h;
        store.srcs = {receive_from(call, q, stream_tag(2, j, q), elem)};
        store.sinks = {out_range(from[i])};
        phase.push_back(std::move(store));
      }
    }
  }
  std::vector<Phase> phases{std::move(phase)};
  if (h > 0) run_phases(call, phases);
}

}  // namespace jaccl
