// XLA FFI handlers for the CPU collectives: the only place where XLA buffers
// become engine calls.
//
// Contract: one handler per collective, all with the same shape: the device
// ordinal (XLA's global device id) finds the device's group and rank in the
// communicator named by the `groups` table; the op runs to completion on the
// calling device thread; any failure is returned as an ffi::Error (after
// telling the peers through the abort board), never thrown or aborted.
#include <cstdio>
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/direct.h"
#include "comm/world.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/memory.h"
#include "common/text.h"
#include "handlers/order_operand.h"
#include "handlers/call_setup.h"
#include "handlers/engine_api.h"
#include "handlers/cpu_handlers.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaccl {
namespace {


// Logs the transport and algorithm once per communicator, op and size class.
void log_choice(const Call& call, size_t bytes) {
  if (log_level() < LogLevel::kInfo) return;
  int size_class = 0;
  while ((size_t{1} << size_class) < bytes) ++size_class;
  if (!first_time(text(call.comm->id(), '/', static_cast<int>(call.kind), '/', size_class, '/',
                       call.member->rank))) {
    return;
  }
  std::string transports;
  for (size_t r = 0; r < call.member->to.size(); ++r) {
    if (call.member->to[r]) append(transports, transports.empty() ? "" : ",", call.member->to[r]->kind());
  }
  log(LogLevel::kInfo, kind_name(call.kind), " ", bytes, " B (<= 2^", size_class, ") on rank ",
      call.member->rank, "/", call.member->size, " of communicator ", hex(call.comm->id()),
      ": algorithm ", algorithm_name(call.algorithm), ", transports ",
      transports.empty() ? "none" : transports);
}

}  // namespace

// One collective on host buffers (the CPU handlers and, through engine_api.h, the CUDA ones).
void run_host_collective(Call& call, CollectiveKind kind, const Buffers& buffers, int64_t op,
                         int64_t algorithm) {
    call.op = static_cast<ReduceOp>(op);
    Communicator::Member& member = *call.member;
    const size_t esize = dtype_size(call.dtype);
    if (member.size == 1) {
      if (buffers.out != buffers.in) std::memcpy(buffers.out, buffers.in, buffers.in_count * esize);
      return;
    }
    const size_t bytes = std::max(buffers.in_count, buffers.out_count) * esize;
    if (buffers.out != buffers.in) prefer_huge_pages(buffers.out, buffers.out_count * esize);
    GroupShape shape{member.size, member.direct != nullptr, member.hierarchical};
    call.algorithm = choose_algorithm(kind, static_cast<Algorithm>(algorithm), bytes, shape);
    log_choice(call, bytes);
    const Clock::time_point start = Clock::now();
    if (call.algorithm == Algorithm::kDirect) {
      direct_collective(call, buffers);
    } else {
      switch (kind) {
        case CollectiveKind::kAllReduce: all_reduce(call, buffers); break;
        case CollectiveKind::kReduceScatter: reduce_scatter(call, buffers); break;
        case CollectiveKind::kAllGather: all_gather(call, buffers); break;
        case CollectiveKind::kAllToAll: all_to_all(call, buffers); break;
        default: throw_error(ErrorKind::kInvalidArgument, "not a collective handler");
      }
    }
    log(LogLevel::kTrace, kind_name(kind), " #", call.seq, " ", bytes, " B on rank ",
        member.rank, ": ", algorithm_name(call.algorithm), " ", seconds_since(start) * 1e6, " us");
}

ffi::Error run_collective(CollectiveKind kind, int64_t device, ffi::AnyBuffer in,
                          ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                          int64_t group_size, int64_t op, int64_t algorithm, int64_t outer_in,
                          int64_t outer_out) {
  return with_call(kind, device, groups, group_size, dtype_from_xla(in.element_type()),
                   in.element_count(), [&](Call& call) {
    Buffers buffers;
    buffers.in = in.untyped_data();
    buffers.out = out->untyped_data();
    buffers.in_count = in.element_count();
    buffers.out_count = out->element_count();
    buffers.outer_in = static_cast<size_t>(outer_in);
    buffers.outer_out = static_cast<size_t>(outer_out);
    run_host_collective(call, kind, buffers, op, algorithm);
  });
}

}  // namespace jaccl

extern "C" int jaccl_run_host_call(const JacclHostCall* c, char* error, size_t error_len) {
  using namespace jaccl;
  ffi::Span<const int64_t> groups(c->groups, c->groups_len);
  ffi::Error result = with_call(
      static_cast<CollectiveKind>(c->kind), c->device, groups, c->group_size,
      static_cast<Dtype>(c->dtype), c->in_count, [&](Call& call) {
        Buffers buffers;
        buffers.in = c->in;
        buffers.out = c->out;
        buffers.in_count = c->in_count;
        buffers.out_count = c->out_count;
        buffers.outer_in = c->outer_in;
        buffers.outer_out = c->outer_out;
        run_host_collective(call, static_cast<CollectiveKind>(c->kind), buffers, c->op, c->algorithm);
      });
  if (result.success()) return 0;
  std::snprintf(error, error_len, "%s", result.message().c_str());
  return 1;
}

extern "C" void jaccl_raise_abort(const char* why) {
  jaccl::World::Use use;
  if (use.world() != nullptr) use.world()->raise_abort(why);
}

namespace jaccl {
namespace {

ffi::Error AllReduceImpl(int32_t device, OrderIn, ffi::AnyBuffer x, OrderOut,
                         ffi::Result<ffi::AnyBuffer> out,
                         ffi::Span<const int64_t> groups, int64_t group_size, int64_t op,
                         int64_t algorithm) {
  return run_collective(CollectiveKind::kAllReduce, device, x, out, groups, group_size, op,
                        algorithm, 1, 1);
}

ffi::Error ReduceScatterImpl(int32_t device, OrderIn, ffi::AnyBuffer x, OrderOut,
                             ffi::Result<ffi::AnyBuffer> out,
                             ffi::Span<const int64_t> groups, int64_t group_size, int64_t op,
                             int64_t algorithm, int64_t outer) {
  return run_collective(CollectiveKind::kReduceScatter, device, x, out, groups, group_size, op,
                        algorithm, outer, 1);
}

ffi::Error AllGatherImpl(int32_t device, OrderIn, ffi::AnyBuffer x, OrderOut,
                         ffi::Result<ffi::AnyBuffer> out,
                         ffi::Span<const int64_t> groups, int64_t group_size, int64_t algorithm,
                         int64_t outer) {
  return run_collective(CollectiveKind::kAllGather, device, x, out, groups, group_size,
                        static_cast<int64_t>(ReduceOp::kSum), algorithm, 1, outer);
}

ffi::Error AllToAllImpl(int32_t device, OrderIn, ffi::AnyBuffer x, OrderOut,
                        ffi::Result<ffi::AnyBuffer> out,
                        ffi::Span<const int64_t> groups, int64_t group_size, int64_t outer_in,
                        int64_t outer_out) {
  return run_collective(CollectiveKind::kAllToAll, device, x, out, groups, group_size,
                        static_cast<int64_t>(ReduceOp::kSum), 0, outer_in, outer_out);
}

}  // namespace
}  // namespace jaccl

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_all_reduce, jaccl::AllReduceImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()  // orders the collectives of a device
                                  .Arg<ffi::AnyBuffer>()                   // x
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()                   // reduced x
                                  .Attr<ffi::Span<const int64_t>>("groups")  // device ids, rank order
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("op")                     // ReduceOp
                                  .Attr<int64_t>("algorithm"));            // Algorithm

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_reduce_scatter, jaccl::ReduceScatterImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()  // orders the collectives of a device
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<ffi::Span<const int64_t>>("groups")
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("op")
                                  .Attr<int64_t>("algorithm")
                                  .Attr<int64_t>("outer"));  // elements before the scatter dim

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_all_gather, jaccl::AllGatherImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()  // orders the collectives of a device
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<ffi::Span<const int64_t>>("groups")
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("algorithm")
                                  .Attr<int64_t>("outer"));  // elements before the gather dim

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_all_to_all, jaccl::AllToAllImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()  // orders the collectives of a device
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<ffi::Span<const int64_t>>("groups")
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("outer_in")    // elements before the split dim
                                  .Attr<int64_t>("outer_out"));  // elements before the concat dim
