// One MoE dispatch or combine of this process's engine for one device, from the CPU
// handlers and (through abi/host_abi.h) the CUDA module's staged host jobs alike.
//
// Contract: run_moe() takes a MoeRequest (moe/request.h) of host buffers, checks it
// (check_moe_request), validates every list, offset and expert id against the buffers (a bad
// value is an error naming it, never a stray access), then runs
// moe_dispatch (kMoeDispatch) or moe_combine (kMoeCombine) inside run_call (collectives/run.h):
// it never throws, and returns the failure it posted on the abort board.
#pragma once

#include <cstdint>
#include <optional>

#include "collectives/run.h"
#include "moe/request.h"

namespace jaccl {

std::optional<Failure> run_moe(const MoeRequest& request);

}  // namespace jaccl
