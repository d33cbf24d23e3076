// Small helpers the algorithms share to name streams and endpoints.
#pragma once

#include "collectives/engine.h"

namespace jaccl {

// A stream's tag: which phase of the algorithm, which ring direction, which
// step or block. Both ends compute the same tag for the same stream.
inline uint32_t stream_tag(uint32_t phase, uint32_t direction, uint32_t index) {
  return (phase << 24) | (direction << 16) | (index & 0xffffu);
}

inline Endpoint send_to(const Call& call, int peer, uint32_t tag, Dtype dtype) {
  return Endpoint::stream(call.member->to[peer], peer, tag, dtype);
}

inline Endpoint receive_from(const Call& call, int peer, uint32_t tag, Dtype dtype) {
  return Endpoint::stream(call.member->from[peer], peer, tag, dtype);
}

// A task that streams local memory `from` to `peer`, and one that stores a stream from `peer`
// into local memory `to`; `single_copy`: either may go by address (engine.h, "Single copy").
inline Task send_task(const Call& call, const Region& from, Dtype dtype, int peer, uint32_t tag,
                      bool single_copy = false) {
  Task t;
  t.count = from.count;
  t.srcs = {Endpoint::local(from, dtype)};
  t.sinks = {send_to(call, peer, tag, dtype)};
  t.single_copy = single_copy;
  return t;
}

inline Task store_task(const Call& call, int peer, uint32_t tag, const Region& to, Dtype dtype,
                       bool single_copy = false) {
  Task t;
  t.count = to.count;
  t.srcs = {receive_from(call, peer, tag, dtype)};
  t.sinks = {Endpoint::local(to, dtype)};
  t.single_copy = single_copy;
  return t;
}

inline int wrap(int rank, int size) { return ((rank % size) + size) % size; }

// Start of part q when n elements are cut into `parts` nearly equal pieces.
inline size_t part_start(size_t n, int parts, int q) { return n * q / parts; }

}  // namespace jaccl
