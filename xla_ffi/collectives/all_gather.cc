// all_gather: rank r's input becomes block r of every rank's output (strided
// along the gather dimension when it is not the leading one).
//
// mesh (default): rank r sends its input to every peer at once, copies it
// into its own block, and stores each peer's stream into that peer's block. One
// task reads each chunk of the input once and writes it to the own block and to
// the streams of every peer, but for peers of this host that read the input in
// place (engine.h, "Single copy"), whose streams are tasks of their own.
//
// ring: ring.h's all-gather, the input split in halves between two
// directions.
#include "collectives/collectives.h"
#include "collectives/ring.h"
#include "collectives/streams.h"

namespace jaccl {
namespace {

void mesh(Call& call, const Buffers& b) {
  const int n = call.member->size, r = call.member->rank;
  const Dtype elem = call.dtype;
  const size_t esize = dtype_size(elem);
  Region in = Region::contiguous(b.in, esize, b.in_count);
  auto block = [&](int q) { return Region::block(b.out, esize, b.out_count, b.outer_out, n, q); };
  const bool in_place = b.disjoint(esize);
  Phase phase;
  Task send;
  send.count = b.in_count;
  send.srcs = {Endpoint::local(in, elem)};
  send.sinks = {Endpoint::local(block(r), elem)};
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    Endpoint stream = send_to(call, q, stream_tag(2, 0, r), elem);
    if (in_place && single_copy_stream(call, r, q, b.in_count * esize)) {
      Task alone;
      alone.count = b.in_count;
      alone.srcs = {Endpoint::local(in, elem)};
      alone.sinks = {stream};
      alone.single_copy = true;
      phase.push_back(std::move(alone));
    } else {
      send.sinks.push_back(stream);
    }
  }
  phase.push_back(std::move(send));
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    Task store;
    store.count = b.in_count;
    store.srcs = {receive_from(call, q, stream_tag(2, 0, q), elem)};
    store.sinks = {Endpoint::local(block(q), elem)};
    store.single_copy = true;
    phase.push_back(std::move(store));
  }
  std::vector<Phase> phases{std::move(phase)};
  run_phases(call, phases);
}

void ring(Call& call, const Buffers& b) {
  const int n = call.member->size, r = call.member->rank, dirs = ring_directions(call);
  const Dtype elem = call.dtype;
  const size_t esize = dtype_size(elem), count = b.in_count;
  Region in = Region::contiguous(b.in, esize, count);
  Phase phase;
  Task own;
  own.count = count;
  own.srcs = {Endpoint::local(in, elem)};
  own.sinks = {Endpoint::local(Region::block(b.out, esize, b.out_count, b.outer_out, n, r), elem)};
  phase.push_back(std::move(own));
  for (int d = 0; d < dirs; ++d) {
    const size_t begin = part_start(count, dirs, d), len = part_start(count, dirs, d + 1) - begin;
    BlockOf out_block = [&, begin, len](int q) {
      return Region::block(b.out, esize, b.out_count, b.outer_out, n, q).slice(begin, len);
    };
    add_ring_all_gather(call, phase, 2, d, in.slice(begin, len), out_block);
  }
  std::vector<Phase> phases{std::move(phase)};
  run_phases(call, phases);
}

}  // namespace

void all_gather(Call& call, const Buffers& b) {
  if (call.algorithm == Algorithm::kMesh) return mesh(call, b);
  return ring(call, b);
}

}  // namespace jaccl
