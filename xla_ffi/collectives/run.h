// One call of this process's engine for one device, as every caller (the CPU handlers, and
// the CUDA module's staged host jobs through abi/host_abi.h) makes it.
//
// Contract: run_call(address, op_count, body) finds the world, the communicator a CallAddress
// (collectives/request.h) names (by its id `comm`, fixed at lowering for jaccl's own ops, or
// derived from the `groups` table, group_size per row, in sequence space `space`
// (comm/spaces.h: XLA's collectives through the mpiabi library are numbered apart) with `lane`
// (jaccl's own calls: comm/lanes.h) or `split_round` (the mpiabi library's)) and this device's
// member of it, numbers the call, and runs body(Call&) with call.world/comm/member/
// kind/dtype/seq/timeout set, call.op_count = `op_count` (elements, checked against the
// peers') and call.site = `site` (common/call_sites.h). body throws jaccl::Error (or anything)
// on failure; run_call never throws: it posts the failure on the abort board (so the peers
// stop too) and returns it.
// run_collective() and run_point_to_point() are one request (collectives/request.h), as every
// caller describes it, checked and run inside run_call (never throw).
#pragma once

#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>

#include "collectives/collectives.h"
#include "collectives/request.h"
#include "comm/communicator.h"
#include "comm/world.h"
#include "common/error.h"

namespace jaccl {

struct Failure {
  ErrorKind kind = ErrorKind::kInternal;
  std::string message;
};

template <typename Body>
std::optional<Failure> run_call(const CallAddress& at, uint64_t op_count, Body&& body) {
  World::Use use;  // the world outlives this call, also when the process is exiting
  World* world = use.world();
  Failure failure;
  try {
    if (world == nullptr) World::require();
    if (world->aborted()) world->check_health({});
    // The mpiabi library's calls with streams of their own need no lock: their member is not the
    // XLA device's own (the mpiabi library places members itself), streams keep channels apart. Its
    // other calls are lane 0's. Lanes run at once only over shared channels; without them every
    // call takes lane 0's lock.
    std::unique_lock<std::recursive_mutex> one_call_per_device;
    const bool own_ops = at.space == Space::kOwnOps;
    if (own_ops || !world->xla_streams()) {
      const uint32_t locked = own_ops && world->shares_channels() ? at.lane : 0;
      one_call_per_device =
          std::unique_lock<std::recursive_mutex>(world->device_lock(at.device, locked));
    }
    Communicator& comm = world->communicator(at.comm, at.groups, at.groups_len,
                                             static_cast<int>(at.group_size), at.space, at.lane,
                                             at.split_round);
    Communicator::Member& member = comm.member(at.device);
    Call call;
    call.world = world;
    call.comm = &comm;
    call.member = &member;
    call.kind = at.kind;
    call.dtype = at.dtype;
    call.op_count = op_count;
    call.site = at.site;
    // Point-to-point transfers involve only their pairs: they are numbered per pair instead.
    const bool numbered = at.kind != CollectiveKind::kPointToPoint;
    call.seq = numbered ? member.seq++ : 0;
    if (numbered && member.calls_entered != nullptr) {
      member.calls_entered->store(member.seq, std::memory_order_release);  // for the peers' waiters
    }
    call.timeout_s = world->config().timeout_s;
    body(call);
    return std::nullopt;
  } catch (const Error& e) {
    failure = Failure{e.kind(), e.what()};
  } catch (const std::exception& e) {
    failure = Failure{ErrorKind::kInternal, std::string("jaccl: internal error: ") + e.what()};
  }
  if (world != nullptr) {
    world->raise_abort(failure.message);
    await_local_reads(5.0);  // the devices of this process reading this call's buffers in place
  }
  return failure;
}

std::optional<Failure> run_collective(const CollectiveRequest& request);
std::optional<Failure> run_point_to_point(const PointToPointRequest& request);

}  // namespace jaccl
