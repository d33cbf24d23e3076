// all_reduce: every rank ends with op(x_0, ..., x_{N-1}), bitwise equal on all
// ranks. Three schedules:
//
// naive (small messages, latency bound): every rank streams its whole input
// to every peer at once and reduces all N inputs itself, in ascending rank
// order, chunk by chunk as they arrive. One round trip of latency. In place,
// the reduction of a chunk waits until every send has read that chunk.
//
// mesh scatter-gather (large messages, all peers reachable): the buffer is cut
// into N blocks. Phase 1 (reduce-scatter): rank r sends block q to rank q for
// every q at once and reduces block r from all N inputs in ascending rank
// order. Phase 2 (all-gather): rank r sends its reduced block to every peer
// and stores theirs. Each rank moves 2(N-1)/N of the buffer over N-1 links in
// parallel; only the owner reduces a block, so every rank gets the same bits.
// Between devices of one process both phases go in place (engine.h, "Single
// copy"): the owner folds a peer's block where it lies, and the peer copies
// the reduced block out of the owner's output. In place is safe: a peer
// overwrites its block r only with what rank r sends in phase 2, after r's
// fold has read it.
//
// ring (ring-only topologies): the buffer is split between two directions,
// each running the ring reduce-scatter and then the ring all-gather of
// ring.h over its half; the two directions run at once.
#include <algorithm>

#include "collectives/collectives.h"
#include "collectives/hierarchical.h"
#include "collectives/ring.h"
#include "collectives/streams.h"

namespace jaccl {
namespace {

void naive(Call& call, const Buffers& b) {
  const int n = call.member->size, r = call.member->rank;
  const Dtype elem = call.dtype;
  const size_t esize = dtype_size(elem);
  Region in = Region::contiguous(b.in, esize, b.in_count);
  Region out = Region::contiguous(b.out, esize, b.in_count);
  Phase phase;
  Task reduce;
  reduce.count = b.in_count;
  for (int q = 0; q < n; ++q) {
    if (q == r) {
      reduce.srcs.push_back(Endpoint::local(in, elem));
      continue;
    }
    Task send;
    send.count = b.in_count;
    send.srcs = {Endpoint::local(in, elem)};
    send.sinks = {send_to(call, q, stream_tag(1, 0, 0), elem)};
    phase.push_back(std::move(send));
    reduce.srcs.push_back(receive_from(call, q, stream_tag(1, 0, 0), elem));
  }
  reduce.sinks = {Endpoint::local(out, elem)};
  if (b.in == b.out) {
    for (int i = 0; i < static_cast<int>(phase.size()); ++i) reduce.after.push_back(i);
  }
  phase.push_back(std::move(reduce));
  std::vector<Phase> phases{std::move(phase)};
  run_phases(call, phases);
}

void mesh(Call& call, const Buffers& b) {
  const int n = call.member->size, r = call.member->rank;
  const Dtype elem = call.dtype;
  const size_t esize = dtype_size(elem), count = b.in_count;
  auto block = [&](const void* base, int q) {
    size_t begin = part_start(count, n, q);
    return Region::contiguous(base, esize, part_start(count, n, q + 1) - begin, begin);
  };
  Phase scatter, gather;
  Task reduce;
  reduce.count = block(b.in, r).count;
  for (int q = 0; q < n; ++q) {
    if (q == r) {
      reduce.srcs.push_back(Endpoint::local(block(b.in, r), elem));
      continue;
    }
    Task send;
    send.count = block(b.in, q).count;
    send.srcs = {Endpoint::local(block(b.in, q), elem)};
    send.sinks = {send_to(call, q, stream_tag(1, 0, q), elem)};
    send.single_copy = true;
    scatter.push_back(std::move(send));
    reduce.srcs.push_back(receive_from(call, q, stream_tag(1, 0, r), elem));

    Task share;
    share.count = block(b.out, r).count;
    share.srcs = {Endpoint::local(block(b.out, r), elem)};
    share.sinks = {send_to(call, q, stream_tag(2, 0, r), elem)};
    share.single_copy = true;
    gather.push_back(std::move(share));
    Task store;
    store.count = block(b.out, q).count;
    store.srcs = {receive_from(call, q, stream_tag(2, 0, q), elem)};
    store.sinks = {Endpoint::local(block(b.out, q), elem)};
    store.single_copy = true;
    gather.push_back(std::move(store));
  }
  reduce.sinks = {Endpoint::local(block(b.out, r), elem)};
  reduce.single_copy = true;
  scatter.push_back(std::move(reduce));
  std::vector<Phase> phases{std::move(scatter), std::move(gather)};
  run_phases(call, phases);
}

void ring(Call& call, const Buffers& b) {
  const int n = call.member->size, r = call.member->rank, dirs = ring_directions(call);
  const Dtype elem = call.dtype;
  const size_t esize = dtype_size(elem), count = b.in_count;
  Phase scatter, gather;
  for (int d = 0; d < dirs; ++d) {
    const size_t begin = part_start(count, dirs, d), len = part_start(count, dirs, d + 1) - begin;
    auto block_of = [&, begin, len](const void* base) {
      return [=](int q) {
        size_t s = part_start(len, n, q);
        return Region::contiguous(base, esize, part_start(len, n, q + 1) - s, begin + s);
      };
    };
    BlockOf in_block = block_of(b.in), out_block = block_of(b.out);
    add_ring_reduce_scatter(call, scatter, 1, d, in_block, out_block(r));
    add_ring_all_gather(call, gather, 2, d, out_block(r), out_block);
  }
  std::vector<Phase> phases{std::move(scatter), std::move(gather)};
  run_phases(call, phases);
}

}  // namespace

void all_reduce(Call& call, const Buffers& b) {
  switch (call.algorithm) {
    case Algorithm::kNaive: return naive(call, b);
    case Algorithm::kMesh: return mesh(call, b);
    case Algorithm::kHierarchical: return hierarchical_all_reduce(call, b);
    default: return ring(call, b);
  }
}

}  // namespace jaccl
