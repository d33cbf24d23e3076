// One call of this process's engine for one device, as every caller (the CPU handlers, and
// the CUDA module's staged host jobs through abi/host_abi.h) makes it.
//
// Contract: run_call(kind, device, groups, ...) finds the world, the communicator named by
// the `groups` table (group_size per row) in sequence space `space` (abi/host_abi.h:
// XLA's collectives through the MPI shim are numbered apart) with `lane` (jaccl's own calls,
// space 0: comm/lanes.h) or `split_round` (the shim's) and this device's member of it,
// numbers the call, and runs body(Call&) with call.world/comm/member/kind/dtype/op_count/
// seq/timeout set and call.site = `site` (common/call_sites.h). body
// throws jaccl::Error (or anything) on failure; run_call never throws: it posts the failure
// on the abort board (so the peers stop too) and returns it.
// run_host_collective() resolves the algorithm and runs one collective on host buffers
// (throws); run_collective() is one CollectiveRequest (collectives/request.h), as every caller
// describes a collective, checked and run.
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
std::optional<Failure> run_call(CollectiveKind kind, int64_t device, const int64_t* groups,
                                size_t groups_len, int64_t group_size, Dtype dtype,
                                uint64_t op_count, Body&& body, int32_t space = 0,
                                uint32_t lane = 0, uint64_t split_round = 0,
                                uint32_t site = 0) {
  World::Use use;  // the world outlives this call, also when the process is exiting
  World* world = use.world();
  Failure failure;
  try {
    if (world == nullptr) World::require();
    if (world->aborted()) world->check_health({});
    // The MPI shim's calls with streams of their own need no lock: their member is not the XLA
    // device's own (the shim places members itself), streams keep channels apart. Its other
    // calls are lane 0's. Lanes run at once only over shared channels; without them every call
    // takes lane 0's lock.
    std::unique_lock<std::recursive_mutex> one_call_per_device;
    if (space == 0 || !world->xla_streams()) {
      const uint32_t locked = space == 0 && world->shares_channels() ? lane : 0;
      one_call_per_device =
          std::unique_lock<std::recursive_mutex>(world->device_lock(device, locked));
    }
    Communicator& comm = world->communicator(groups, groups_len, static_cast<int>(group_size),
                                             space, lane, split_round);
    Communicator::Member& member = comm.member(device);
    Call call;
    call.world = world;
    call.comm = &comm;
    call.member = &member;
    call.kind = kind;
    call.dtype = dtype;
    call.op_count = op_count;
    call.site = site;
    // Point-to-point transfers involve only their pairs: they are numbered per pair instead.
    call.seq = kind == CollectiveKind::kPointToPoint ? 0 : member.seq++;
    if (kind != CollectiveKind::kPointToPoint && member.calls_entered != nullptr) {
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
  if (world != nullptr) world->raise_abort(failure.message);
  return failure;
}

void run_host_collective(Call& call, CollectiveKind kind, const Buffers& buffers, int64_t op,
                         int64_t algorithm);

// Checks `request` against its group (collectives/request.h) and runs it on host buffers
// inside run_call: never throws.
std::optional<Failure> run_collective(const CollectiveRequest& request);

}  // namespace jaccl
