// The C interface of abi/host_abi.h: the CUDA module's staged host jobs run the CPU
// engine that _jaccl owns through these functions (the MPI ABI shim too), each a conversion of the C structs
// into the engine's calls (collectives/run.h, moe/run.h) and of a failure into a message.
#include "abi/host_abi.h"

#include <cstdio>
#include <optional>

#include "abi/host_call.h"
#include "collectives/run.h"
#include "moe/run.h"

namespace {

int report(const std::optional<jaccl::Failure>& failure, char* error, size_t error_len) {
  if (!failure) return 0;
  std::snprintf(error, error_len, "%s", failure->message.c_str());
  return 1;
}

}  // namespace

extern "C" int jaccl_run_host_call(const JacclHostCall* c, char* error, size_t error_len) {
  return report(jaccl::run_collective(jaccl::request_of(*c)), error, error_len);
}

extern "C" int jaccl_run_host_moe(const JacclHostMoeCall* c, char* error, size_t error_len) {
  return report(jaccl::run_moe(jaccl::moe_request_of(*c)), error, error_len);
}

extern "C" int jaccl_run_host_p2p(const JacclHostP2p* c, char* error, size_t error_len) {
  return report(jaccl::run_point_to_point(jaccl::p2p_request_of(*c)), error, error_len);
}

extern "C" void jaccl_raise_abort(const char* why) {
  jaccl::World::Use use;
  if (use.world() != nullptr) use.world()->raise_abort(why);
}

extern "C" int jaccl_world_failed(void) {
  jaccl::World::Use use;
  return use.world() != nullptr && use.world()->aborted() ? 1 : 0;
}
