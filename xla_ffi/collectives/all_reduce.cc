// all_reduce: every rank ends with op(x_0, ..., x_{N-1}), bitwise equal on all
// ranks. Five schedules, four described here (hierarchical's is in
// hierarchical.h):
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
// cascade (P processes each holding D > 1 consecutive ranks): the buffer is cut
// into D parts, and part l travels through rank l of every process in turn.
// Phase 1: rank l of process 0 folds part l of its process's D inputs in rank
// order and streams the running value to rank l of process 1, which goes on
// with its own process's D inputs, and so on, chunk by chunk, so the
// processes work at once; the last process's rank l writes the result. Each
// rank reads its siblings' inputs where they lie (engine.h, "Single copy").
// Phase 2: part l goes back from the last process's rank l to rank l of the
// one before, which stores it and passes it on, and so on down to process 0.
// Phase 2 (last process) or 3 (the others): each rank copies its siblings'
// parts out of their outputs. The fold is mesh's, in rank order, so the bits
// are mesh's (the running value keeps the fold's state: bfloat16's float32
// accumulator, a flushed -0). Between neighbouring processes a part crosses
// once each way (at 2 x 2 half of mesh's frames), and each rank sends and
// receives one part a phase. In place is safe: a rank overwrites a part it
// lent only in its last phase, with what the sibling that read it offers
// after its fold.
//
// ring (ring-only topologies): the buffer is split between two directions,
// each running the ring reduce-scatter and then the ring all-gather of
// ring.h over its half; the two directions run at once.
#include <algorithm>

#include "collectives/collectives.h"
#include "collectives/hierarchical.h"
#include "collectives/ring.h"
#include "collectives/streams.h"
#include "common/error.h"

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
    phase.push_back(send_task(call, in, elem, q, stream_tag(1, 0, 0)));
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

// The tasks by which this rank gives peer q its finished block `mine` (index `me` in the
// stream tags of phase `tag_phase`) and stores q's block `theirs` (index `them`): both lent by
// address where the engine may (engine.h, "Single copy"; the blocks stay as they are until the
// call ends).
void add_swap(const Call& call, Phase& phase, int q, uint32_t tag_phase, int me,
              const Region& mine, int them, const Region& theirs, Dtype elem) {
  phase.push_back(send_task(call, mine, elem, q, stream_tag(tag_phase, 0, me), true));
  phase.push_back(store_task(call, q, stream_tag(tag_phase, 0, them), theirs, elem, true));
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
    scatter.push_back(send_task(call, block(b.in, q), elem, q, stream_tag(1, 0, q), true));
    reduce.srcs.push_back(receive_from(call, q, stream_tag(1, 0, r), elem));

    add_swap(call, gather, q, 2, r, block(b.out, r), q, block(b.out, q), elem);
  }
  reduce.sinks = {Endpoint::local(block(b.out, r), elem)};
  reduce.single_copy = true;
  scatter.push_back(std::move(reduce));
  std::vector<Phase> phases{std::move(scatter), std::move(gather)};
  run_phases(call, phases);
}

// The type of the cascade's running values: bfloat16 sums keep their float32 accumulator to the
// last step (common/reduce.h), so theirs travel in it (and so do the siblings' operands a fold
// takes through frames: one task, one wire type); the other types' are values of the type
// itself (float16 rounds after every step).
Dtype running_dtype(Dtype elem) { return elem == Dtype::kBF16 ? accumulator_dtype(elem) : elem; }

void cascade(Call& call, const Buffers& b) {
  const Communicator::Member& m = *call.member;
  const int run = m.process_run;
  if (run == 0) {
    throw_error(ErrorKind::kInvalidArgument,
                "the cascade algorithm needs a group of several processes each holding the same "
                "number (> 1) of consecutive ranks");
  }
  const int procs = m.size / run, p = m.rank / run, l = m.rank % run;
  const Dtype elem = call.dtype, running = running_dtype(elem);
  const size_t esize = dtype_size(elem), count = b.in_count;
  auto part = [&](const void* base, int j) {
    size_t begin = part_start(count, run, j);
    return Region::contiguous(base, esize, part_start(count, run, j + 1) - begin, begin);
  };
  auto rank_of = [&](int process, int local) { return process * run + local; };
  const bool last = p == procs - 1;
  std::vector<Phase> phases(last ? 2 : 3);

  // 1. Part l through the processes: the fold of part l, going on from the running value of
  //    the processes before this one with this process's ranks in rank order, to the next
  //    process (the last writes the result). Siblings' operands are read where they lie.
  Task fold;
  fold.count = part(b.in, l).count;
  fold.single_copy = true;
  if (p > 0) {
    fold.srcs.push_back(receive_from(call, rank_of(p - 1, l), stream_tag(1, 1, l), running));
    fold.srcs[0].running = true;
  }
  for (int j = 0; j < run; ++j) {
    const int q = rank_of(p, j);
    if (j == l) {
      fold.srcs.push_back(Endpoint::local(part(b.in, l), elem));
      continue;
    }
    fold.srcs.push_back(receive_from(call, q, stream_tag(1, 0, l), running));
    Task lend;
    lend.count = part(b.in, j).count;
    lend.srcs = {Endpoint::local(part(b.in, j), elem)};
    lend.sinks = {send_to(call, q, stream_tag(1, 0, j), running)};
    lend.single_copy = true;
    phases[0].push_back(std::move(lend));
  }
  fold.sinks = {last ? Endpoint::local(part(b.out, l), elem)
                     : send_to(call, rank_of(p + 1, l), stream_tag(1, 1, l), running)};
  phases[0].push_back(std::move(fold));

  // 2. Part l back through the processes, from the last to the first: each rank l stores it
  //    and passes it on, chunk by chunk, so every rank sends and receives it once.  2 or 3.
  //    Within the process, once its own part is here, each rank copies its siblings' parts out
  //    of their outputs.
  const Region mine = part(b.out, l);
  Task back;
  back.count = mine.count;
  if (last) {
    back.srcs = {Endpoint::local(mine, elem)};
  } else {
    back.srcs = {receive_from(call, rank_of(p + 1, l), stream_tag(2, 1, l), elem)};
    back.sinks = {Endpoint::local(mine, elem)};
  }
  if (p > 0) back.sinks.push_back(send_to(call, rank_of(p - 1, l), stream_tag(2, 1, l), elem));
  phases[1].push_back(std::move(back));
  Phase& within = phases.back();
  for (int j = 0; j < run; ++j) {
    if (j == l) continue;
    add_swap(call, within, rank_of(p, j), 3, l, mine, j, part(b.out, j), elem);
  }
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
    case Algorithm::kCascade: return cascade(call, b);
    default: return ring(call, b);
  }
}

}  // namespace jaccl
