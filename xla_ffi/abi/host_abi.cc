// The C interface of abi/host_abi.h: the CUDA module's staged host jobs run the CPU engine that
// _jaccl owns through these functions (the mpiabi library too). The C structs are the engine's
// requests (collectives/run.h, moe/run.h); point-to-point's transfer lists become vectors, and a
// failure becomes a message.
#include "abi/host_abi.h"

#include <cstdio>
#include <optional>
#include <vector>

#include "collectives/run.h"
#include "moe/run.h"

namespace {

jaccl::PointToPointRequest p2p_request_of(const JacclHostP2p& c) {
  auto transfers = [](const JacclTransfer* list, size_t n) {
    std::vector<jaccl::Transfer> out(n);
    for (size_t i = 0; i < n; ++i) {
      out[i] = jaccl::Transfer{static_cast<int>(list[i].peer), list[i].data,
                               static_cast<size_t>(list[i].bytes)};
    }
    return out;
  };
  jaccl::PointToPointRequest r{c.address, transfers(c.sends, c.num_sends),
                               transfers(c.receives, c.num_receives)};
  r.address.kind = jaccl::CollectiveKind::kPointToPoint;
  r.address.dtype = jaccl::Dtype::kU8;
  return r;
}

int report(const std::optional<jaccl::Failure>& failure, char* error, size_t error_len) {
  if (!failure) return 0;
  std::snprintf(error, error_len, "%s", failure->message.c_str());
  return 1;
}

}  // namespace

extern "C" int jaccl_run_host_call(const JacclCollectiveRequest* c, char* error, size_t error_len) {
  return report(jaccl::run_collective(*c), error, error_len);
}

extern "C" int jaccl_run_host_moe(const JacclMoeRequest* c, char* error, size_t error_len) {
  return report(jaccl::run_moe(*c), error, error_len);
}

extern "C" int jaccl_run_host_p2p(const JacclHostP2p* c, char* error, size_t error_len) {
  return report(jaccl::run_point_to_point(p2p_request_of(*c)), error, error_len);
}

extern "C" void jaccl_raise_abort(const char* why) {
  jaccl::World::Use use;
  if (use.world() != nullptr) use.world()->raise_abort(why);
}

extern "C" int jaccl_world_failed(void) {
  jaccl::World::Use use;
  return use.world() != nullptr && use.world()->aborted() ? 1 : 0;
}
