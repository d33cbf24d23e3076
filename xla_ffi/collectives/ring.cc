#include "collectives/ring.h"

#include "collectives/streams.h"

namespace jaccl {

int ring_directions(const Call& call) {
  return call.algorithm == Algorithm::kRingOneWay || call.member->size <= 2 ? 1 : 2;
}

void add_ring_reduce_scatter(const Call& call, Phase& phase, uint32_t phase_id, int direction,
                            const BlockOf& in_block, const Region& out) {
  const int n = call.member->size, r = call.member->rank, sign = direction == 0 ? 1 : -1;
  const int right = wrap(r + sign, n), left = wrap(r - sign, n);
  const Dtype elem = call.dtype, acc = accumulator_dtype(elem);

  Task first;
  Region b0 = in_block(wrap(r - sign, n));
  first.count = b0.count;
  first.srcs = {Endpoint::local(b0, elem)};
  first.sinks = {send_to(call, right, stream_tag(phase_id, direction, 0), acc)};
  phase.push_back(std::move(first));

  for (int k = 0; k <= n - 2; ++k) {
    Region block = in_block(wrap(r - sign * (k + 2), n));
    Task t;
    t.count = block.count;
    t.srcs = {receive_from(call, left, stream_tag(phase_id, direction, k), acc),
              Endpoint::local(block, elem)};
    if (k < n - 2) {
      t.sinks = {send_to(call, right, stream_tag(phase_id, direction, k + 1), acc)};
    } else {
      t.sinks = {Endpoint::local(out, elem)};
    }
    phase.push_back(std::move(t));
  }
}

void add_ring_all_gather(const Call& call, Phase& phase, uint32_t phase_id, int direction,
                         const Region& own, const BlockOf& out_block) {
  const int n = call.member->size, r = call.member->rank, sign = direction == 0 ? 1 : -1;
  const int right = wrap(r + sign, n), left = wrap(r - sign, n);
  const Dtype elem = call.dtype;

  Task first;
  first.count = own.count;
  first.srcs = {Endpoint::local(own, elem)};
  first.sinks = {send_to(call, right, stream_tag(phase_id, direction, 0), elem)};
  phase.push_back(std::move(first));

  for (int k = 0; k <= n - 2; ++k) {
    Region block = out_block(wrap(r - sign * (k + 1), n));
    Task t;
    t.count = block.count;
    t.srcs = {receive_from(call, left, stream_tag(phase_id, direction, k), elem)};
    t.sinks = {Endpoint::local(block, elem)};
    if (k < n - 2) t.sinks.push_back(send_to(call, right, stream_tag(phase_id, direction, k + 1), elem));
    phase.push_back(std::move(t));
  }
}

}  // namespace jaccl
