// ppermute (collective permute): rank r sends its whole input to one rank and receives the
// whole input of another, as the permutation pairs them.
//
// Schedule: one phase with at most two tasks: the send to `send_to` and the store of what
// `receive_from` sends; frames travel only between the pairs of the permutation, each
// stream pipelined through the channel's slots. A pair (r, r) is a local copy. A rank that
// no pair sends to writes zeros, as jax.lax.ppermute's result there is. In place (the output
// is the input's buffer, when XLA can donate it) the store stays behind the send element for
// element, and the zeros come after the send.
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/streams.h"

namespace jaccl {

void permute(Call& call, const Buffers& b) {
  const int r = call.member->rank;
  const Permutation& p = b.permutation;
  const Dtype elem = call.dtype;
  const size_t esize = dtype_size(elem);
  const bool in_place = b.out == b.in;
  Region in = Region::contiguous(b.in, esize, b.in_count);
  Region out = Region::contiguous(b.out, esize, b.out_count);
  Phase phase;
  if (p.send_to == r) {
    if (!in_place) {
      Task copy;
      copy.count = b.in_count;
      copy.srcs = {Endpoint::local(in, elem)};
      copy.sinks = {Endpoint::local(out, elem)};
      phase.push_back(std::move(copy));
    }
  } else {
    int send = -1;
    if (p.send_to >= 0) {
      Task t;
      t.count = b.in_count;
      t.srcs = {Endpoint::local(in, elem)};
      t.sinks = {send_to(call, p.send_to, stream_tag(1, 0, r), elem)};
      send = static_cast<int>(phase.size());
      phase.push_back(std::move(t));
    }
    if (p.receive_from >= 0) {
      Task store;
      store.count = b.out_count;
      store.srcs = {receive_from(call, p.receive_from, stream_tag(1, 0, p.receive_from), elem)};
      store.sinks = {Endpoint::local(out, elem)};
      if (in_place && send >= 0) store.after = {send};
      phase.push_back(std::move(store));
    }
  }
  std::vector<Phase> phases{std::move(phase)};
  run_phases(call, phases);
  if (p.receive_from < 0) std::memset(b.out, 0, b.out_count * esize);
}

}  // namespace jaccl
