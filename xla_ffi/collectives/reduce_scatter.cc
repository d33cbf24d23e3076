// reduce_scatter: rank r ends with block r of op(x_0, ..., x_{N-1}), where the
// blocks split the input along the scatter dimension (strided when that is
// not the leading one; regions read them in place).
//
// mesh (default): rank r sends block q to every rank q at once and reduces
// block r from all N inputs in ascending rank order, chunk by chunk, in the
// accumulator type. One step; each link carries 1/N of the buffer. A peer in
// this process lends its block in place instead (engine.h, "Single copy"):
// the fold reads it where it lies.
//
// ring: ring.h's reduce-scatter. With two directions each block is cut in
// halves, the first half travelling one way round the ring and the second
// the other way.
#include "collectives/collectives.h"
#include "collectives/hierarchical.h"
#include "collectives/ring.h"
#include "collectives/streams.h"

namespace jaccl {
namespace {

void mesh(Call& call, const Buffers& b) {
  const int n = call.member->size, r = call.member->rank;
  const Dtype elem = call.dtype;
  const size_t esize = dtype_size(elem);
  auto block = [&](int q) { return Region::block(b.in, esize, b.in_count, b.outer_in, n, q); };
  Phase phase;
  Task reduce;
  reduce.count = b.out_count;
  for (int q = 0; q < n; ++q) {
    if (q == r) {
      reduce.srcs.push_back(Endpoint::local(block(r), elem));
      continue;
    }
    phase.push_back(send_task(call, block(q), elem, q, stream_tag(1, 0, q), true));
    reduce.srcs.push_back(receive_from(call, q, stream_tag(1, 0, r), elem));
  }
  reduce.sinks = {Endpoint::local(Region::contiguous(b.out, esize, b.out_count), elem)};
  reduce.single_copy = true;
  phase.push_back(std::move(reduce));
  std::vector<Phase> phases{std::move(phase)};
  run_phases(call, phases);
}

void ring(Call& call, const Buffers& b) {
  const int n = call.member->size, dirs = ring_directions(call);
  const size_t esize = dtype_size(call.dtype), count = b.out_count;
  Region out = Region::contiguous(b.out, esize, count);
  Phase phase;
  for (int d = 0; d < dirs; ++d) {
    const size_t begin = part_start(count, dirs, d), len = part_start(count, dirs, d + 1) - begin;
    BlockOf in_block = [&, begin, len](int q) {
      return Region::block(b.in, esize, b.in_count, b.outer_in, n, q).slice(begin, len);
    };
    add_ring_reduce_scatter(call, phase, 1, d, in_block, out.slice(begin, len));
  }
  std::vector<Phase> phases{std::move(phase)};
  run_phases(call, phases);
}

}  // namespace

void reduce_scatter(Call& call, const Buffers& b) {
  if (call.algorithm == Algorithm::kMesh) return mesh(call, b);
  if (call.algorithm == Algorithm::kHierarchical) return hierarchical_reduce_scatter(call, b);
  return ring(call, b);
}

}  // namespace jaccl
