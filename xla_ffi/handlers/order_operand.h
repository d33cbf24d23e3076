// The first operand and result of every jaccl custom call: what orders a device's jaccl calls.
//
// Contract: an XLA token, or an int32 scalar where XLA cannot place tokens (a shard_map manual
// over only some mesh axes: the partitioner gives tokens there a tiled sharding and stops).
// Handlers never read or write it; it exists so that each call data-depends on the one before.
#pragma once

#include "xla/ffi/api/ffi.h"

namespace jaccl {

using OrderIn = xla::ffi::AnyBuffer;
using OrderOut = xla::ffi::Result<xla::ffi::AnyBuffer>;

}  // namespace jaccl
