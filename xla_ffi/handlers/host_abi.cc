// The C interface of handlers/host_abi.h: the CUDA module's staged host jobs run the CPU
// engine that _jaccl owns through these functions (the MPI ABI shim too), each a conversion of the C structs
// into the engine's calls (collectives/run.h, moe/run.h) and of a failure into a message.
#include "handlers/host_abi.h"

#include <cstdio>
#include <optional>
#include <vector>

#include "collectives/run.h"
#include "handlers/host_call.h"
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
  using namespace jaccl;
  MoeRequest r;
  r.kind = static_cast<CollectiveKind>(c->kind);
  r.device = c->device;
  r.groups = c->groups;
  r.groups_len = c->groups_len;
  r.group_size = c->group_size;
  r.dtype = static_cast<Dtype>(c->dtype);
  r.rows = c->rows;
  r.rows_count = c->rows_count;
  r.row_elems = c->row_elems;
  for (int i = 0; i < 4; ++i) {
    r.lists[i] = c->lists[i];
    r.list_counts[i] = c->list_counts[i];
  }
  r.topk_idx = c->topk_idx;
  r.topk_count = c->topk_count;
  r.num_experts = c->num_experts;
  r.extra = c->extra;
  r.extra_count = c->extra_count;
  r.extra_dtype = static_cast<Dtype>(c->extra_dtype);
  r.topk = c->topk;
  r.pair_dot = c->pair_dot != 0;
  r.out = c->out;
  r.out_rows = c->out_rows;
  r.out_count = c->out_count;
  r.site = c->site;
  return report(run_moe(r), error, error_len);
}

extern "C" int jaccl_run_host_p2p(const JacclHostP2p* c, char* error, size_t error_len) {
  using namespace jaccl;
  return report(run_call(CollectiveKind::kPointToPoint, c->device, c->group, c->group_size,
                         static_cast<int64_t>(c->group_size), Dtype::kU8, 0, [&](Call& call) {
    auto transfers = [](const JacclTransfer* list, size_t n) {
      std::vector<Transfer> out(n);
      for (size_t i = 0; i < n; ++i) {
        out[i] = Transfer{static_cast<int>(list[i].peer), list[i].data,
                          static_cast<size_t>(list[i].bytes)};
      }
      return out;
    };
    point_to_point(call, transfers(c->sends, c->num_sends),
                   transfers(c->receives, c->num_receives));
  }, c->space, c->salt), error, error_len);
}

extern "C" void jaccl_raise_abort(const char* why) {
  jaccl::World::Use use;
  if (use.world() != nullptr) use.world()->raise_abort(why);
}

extern "C" int jaccl_world_failed(void) {
  jaccl::World::Use use;
  return use.world() != nullptr && use.world()->aborted() ? 1 : 0;
}
