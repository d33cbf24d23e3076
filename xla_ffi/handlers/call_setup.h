// What every FFI handler does around its work: find the world, the communicator named by
// the `groups` table and this device's member of it, number the call, and turn any failure
// into an ffi::Error after posting it on the abort board (so the peers stop too).
//
// Contract: with_call(kind, device, groups, group_size, dtype, op_count, body) runs
// body(Call&) with call.world/comm/member/kind/dtype/op_count/seq/timeout set; body returns
// nothing and throws jaccl::Error on failure. Never throws itself.
#pragma once

#include <cstdint>
#include <string>

#include "collectives/engine.h"
#include "comm/world.h"
#include "common/error.h"
#include "xla/ffi/api/ffi.h"

namespace jaccl {

Dtype dtype_from_xla(xla::ffi::DataType type);  // throws for an element type it cannot move
// The error a handler returns for an element type the engine does not move.
xla::ffi::Error unsupported_type(CollectiveKind kind, xla::ffi::DataType type);
xla::ffi::ErrorCode error_code(ErrorKind kind);

template <typename Body>
xla::ffi::Error with_call(CollectiveKind kind, int64_t device, xla::ffi::Span<const int64_t> groups,
                          int64_t group_size, Dtype dtype, uint64_t op_count, Body&& body) {
  World::Use use;  // the world outlives this call, also when the process is exiting
  World* world = use.world();
  try {
    if (world == nullptr) World::require();
    if (world->aborted()) world->check_health({});
    Communicator& comm = world->communicator(groups.begin(), groups.size(),
                                             static_cast<int>(group_size));
    Communicator::Member& member = comm.member(device);
    Call call;
    call.world = world;
    call.comm = &comm;
    call.member = &member;
    call.kind = kind;
    call.dtype = dtype;
    call.op_count = op_count;
    call.seq = member.seq++;
    call.timeout_s = world->config().timeout_s;
    body(call);
    return xla::ffi::Error::Success();
  } catch (const Error& e) {
    if (world != nullptr) world->raise_abort(e.what());
    return xla::ffi::Error(error_code(e.kind()), e.what());
  } catch (const std::exception& e) {
    std::string message = std::string("jaccl: internal error: ") + e.what();
    if (world != nullptr) world->raise_abort(message);
    return xla::ffi::Error(xla::ffi::ErrorCode::kInternal, message);
  }
}

}  // namespace jaccl
