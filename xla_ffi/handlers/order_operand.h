// What orders a device's jaccl calls, as every custom call carries it (jax_jaccl/_ordering.py):
// its first operand and result, and its `lane` attribute.
//
// Contract: the operand is an XLA token, or an int32 scalar where XLA cannot place tokens (a
// shard_map manual over only some mesh axes: the partitioner gives tokens there a tiled
// sharding and stops). Handlers never read or write it; it exists so that each call
// data-depends on the one before. lane_of_attribute() is the lane (comm/lanes.h) of the call's
// chain, below kMaxLanes.
#pragma once

#include <cstdint>

#include "comm/lanes.h"
#include "xla/ffi/api/ffi.h"

namespace jaccl {

using OrderIn = xla::ffi::AnyBuffer;
using OrderOut = xla::ffi::Result<xla::ffi::AnyBuffer>;

inline uint32_t lane_of_attribute(int64_t lane) {
  return static_cast<uint32_t>(static_cast<uint64_t>(lane) % kMaxLanes);
}

}  // namespace jaccl
