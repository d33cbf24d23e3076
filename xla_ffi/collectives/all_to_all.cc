// all_to_all: block q of rank r's input (split dimension) becomes block r of
// rank q's output (concat dimension). Every rank sends block q to rank q for
// all q at once, copies its own block locally, and stores each peer's stream
// into that peer's output block. Strided blocks are read and written in place.
// A peer of this host may read its contiguous block straight out of the input
// (engine.h, "Single copy").
#include "collectives/collectives.h"
#include "collectives/streams.h"

namespace jaccl {

void all_to_all(Call& call, const Buffers& b) {
  const int n = call.member->size, r = call.member->rank;
  const Dtype elem = call.dtype;
  const size_t esize = dtype_size(elem);
  auto in_block = [&](int q) { return Region::block(b.in, esize, b.in_count, b.outer_in, n, q); };
  auto out_block = [&](int q) {
    return Region::block(b.out, esize, b.out_count, b.outer_out, n, q);
  };
  const bool in_place = b.disjoint(esize);
  Phase phase;
  for (int q = 0; q < n; ++q) {
    Task t;
    t.count = b.in_count / n;
    t.srcs = {Endpoint::local(in_block(q), elem)};
    if (q == r) {
      t.sinks = {Endpoint::local(out_block(r), elem)};
      phase.push_back(std::move(t));
      continue;
    }
    t.sinks = {send_to(call, q, stream_tag(1, 0, q), elem)};
    t.single_copy = in_place;
    phase.push_back(std::move(t));
    Task store;
    store.count = b.out_count / n;
    store.srcs = {receive_from(call, q, stream_tag(1, 0, r), elem)};
    store.sinks = {Endpoint::local(out_block(q), elem)};
    store.single_copy = true;
    phase.push_back(std::move(store));
  }
  std::vector<Phase> phases{std::move(phase)};
  run_phases(call, phases);
}

}  // namespace jaccl
