// Sequence spaces: the collectives XLA hands the mpiabi library are numbered apart from jaccl's own
// ops on the same group of devices (a communicator of their own), so that a jaccl op on one
// rank never pairs with an XLA collective on another: ranks that take them in different orders
// get "ranks disagree", never each other's data.
//
// Contract: the values are abi/host_abi.h's kJacclOwnOps and kJacclXlaCollectives (the mpiabi
// library's C names for them); a request's `space` is one of them (collectives/request.h).
#pragma once

#include <cstdint>

namespace jaccl {

enum class Space : int32_t { kOwnOps = 0, kXlaCollectives = 1 };

}  // namespace jaccl
