// XLA FFI handlers for the CPU collectives: XLA buffers and attributes in, an engine call
// (collectives/run.h), an ffi::Future out: the call runs on XLA's thread or, from
// async_min_bytes() up (and always in lanes other than 0), on the lane's call thread while XLA
// computes on (async_call.h).
//
// Contract: one handler per collective, all with the same shape: the device ordinal (XLA's
// global device id) finds the device's group and rank in the communicator named by the
// `groups` table; any failure completes the future with an ffi::Error (after telling the
// peers through the abort board), never thrown or aborted. What a call uses after its handler
// returns is captured by value (XLA keeps buffers and attributes alive until the future
// completes).
#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/run.h"
#include "handlers/call_setup.h"
#include "handlers/cpu/async_call.h"
#include "handlers/cpu/symbols.h"
#include "handlers/order_operand.h"
#include "handlers/ragged_indices.h"
#include "handlers/xla_dtype.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaccl {
namespace {

// A request (collectives/request.h) for `device` over the communicator of `groups` (its id
// `comm`, fixed at lowering), in `lane` (comm/lanes.h) and at `site` (common/call_sites.h), of
// x's element type. It points into XLA's attributes and buffers.
struct Request : CollectiveRequest {
  Request(CollectiveKind kind, int64_t device, ffi::Span<const int64_t> groups,
          int64_t group_size, int64_t site, int64_t lane, int64_t comm,
          const ffi::AnyBuffer& in, ffi::Result<ffi::AnyBuffer>& result)
      : CollectiveRequest{} {
    address.kind = kind;
    address.device = device;
    address.groups = groups.begin();
    address.groups_len = groups.size();
    address.group_size = group_size;
    address.lane = lane_of_attribute(lane);
    address.site = static_cast<uint32_t>(site);
    address.comm = static_cast<uint64_t>(comm);
    known_type = dtype_of_xla(in.element_type(), &address.dtype);
    element_type = in.element_type();
    this->in = in.untyped_data();
    out = result->untyped_data();
    in_count = in.element_count();
    out_count = result->element_count();
    bytes = std::max(in.size_bytes(), result->size_bytes());
  }
  bool known_type;
  ffi::DataType element_type;
  size_t bytes;
};

// Runs `r` at once or queued on its lane's thread (async_call.h). A queued request takes
// copies of the group table and the ppermute pairs: XLA keeps the call's buffers alive until
// the future completes, not its attributes.
ffi::Future submit(const Request& r) {
  const CallAddress& at = r.address;
  if (!r.known_type) return completed(unsupported_type(at.kind, r.element_type));
  if (runs_now(at.device, at.lane, r.bytes)) return completed(to_ffi(run_collective(r)));
  CollectiveRequest queued = r;
  std::vector<int64_t> table(at.groups, at.groups + at.groups_len);
  std::vector<int64_t> pairs(r.pairs, r.pairs + r.pairs_len);
  return queue(at.device, at.lane, [queued, table, pairs]() mutable {
    queued.address.groups = table.data();
    queued.pairs = pairs.data();
    return run_collective(queued);
  });
}

ffi::Future AllReduceImpl(int32_t device, OrderIn, ffi::AnyBuffer x, OrderOut,
                         ffi::Result<ffi::AnyBuffer> out,
                         ffi::Span<const int64_t> groups, int64_t group_size, int64_t site,
                         int64_t lane, int64_t comm, int64_t op, int64_t algorithm) {
  Request r(CollectiveKind::kAllReduce, device, groups, group_size, site, lane, comm, x, out);
  r.op = static_cast<ReduceOp>(op);
  r.algorithm = static_cast<Algorithm>(algorithm);
  return submit(r);
}

ffi::Future ReduceScatterImpl(int32_t device, OrderIn, ffi::AnyBuffer x, OrderOut,
                             ffi::Result<ffi::AnyBuffer> out,
                             ffi::Span<const int64_t> groups, int64_t group_size,
                             int64_t site, int64_t lane, int64_t comm, int64_t op,
                             int64_t algorithm, int64_t outer) {
  Request r(CollectiveKind::kReduceScatter, device, groups, group_size, site, lane, comm, x,
            out);
  r.op = static_cast<ReduceOp>(op);
  r.algorithm = static_cast<Algorithm>(algorithm);
  r.outer_in = static_cast<size_t>(outer);
  return submit(r);
}

ffi::Future AllGatherImpl(int32_t device, OrderIn, ffi::AnyBuffer x, OrderOut,
                         ffi::Result<ffi::AnyBuffer> out,
                         ffi::Span<const int64_t> groups, int64_t group_size, int64_t site,
                         int64_t lane, int64_t comm, int64_t algorithm, int64_t outer) {
  Request r(CollectiveKind::kAllGather, device, groups, group_size, site, lane, comm, x, out);
  r.algorithm = static_cast<Algorithm>(algorithm);
  r.outer_out = static_cast<size_t>(outer);
  return submit(r);
}

ffi::Future AllToAllImpl(int32_t device, OrderIn, ffi::AnyBuffer x, OrderOut,
                        ffi::Result<ffi::AnyBuffer> out,
                        ffi::Span<const int64_t> groups, int64_t group_size, int64_t site,
                        int64_t lane, int64_t comm, int64_t outer_in, int64_t outer_out) {
  Request r(CollectiveKind::kAllToAll, device, groups, group_size, site, lane, comm, x, out);
  r.outer_in = static_cast<size_t>(outer_in);
  r.outer_out = static_cast<size_t>(outer_out);
  return submit(r);
}

ffi::Future PermuteImpl(int32_t device, OrderIn, ffi::AnyBuffer x, OrderOut,
                       ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                       int64_t group_size, int64_t site, int64_t lane, int64_t comm,
                       ffi::Span<const int64_t> perm) {
  Request r(CollectiveKind::kPermute, device, groups, group_size, site, lane, comm, x, out);
  r.pairs = perm.begin();
  r.pairs_len = perm.size();
  return submit(r);
}

// ragged_all_to_all into `out`, which holds the output operand's rows already (aliased) or,
// with zero_unwritten, nothing yet.
ffi::Future run_ragged(int32_t device, ffi::AnyBuffer operand, size_t out_rows,
                       const ffi::AnyBuffer* const indices[4], ffi::Result<ffi::AnyBuffer> out,
                       ffi::Span<const int64_t> groups, int64_t group_size, int64_t site,
                       int64_t lane, int64_t comm, bool zero_unwritten) {
  Request r(CollectiveKind::kRaggedAllToAll, device, groups, group_size, site, lane, comm,
            operand, out);
  if (out->element_type() != operand.element_type()) r.known_type = false;
  set_ragged(&r, operand, out_rows, indices);
  r.zero_unwritten = zero_unwritten;
  return submit(r);
}

ffi::Future RaggedAllToAllImpl(int32_t device, OrderIn, ffi::AnyBuffer operand,
                              ffi::AnyBuffer output, ffi::AnyBuffer input_offsets,
                              ffi::AnyBuffer send_sizes, ffi::AnyBuffer output_offsets,
                              ffi::AnyBuffer recv_sizes, OrderOut, ffi::Result<ffi::AnyBuffer> out,
                              ffi::Span<const int64_t> groups, int64_t group_size, int64_t site,
                              int64_t lane, int64_t comm) {
  if (ffi::Error e = output_error(output, *out); e.failure()) return completed(std::move(e));
  if (out->untyped_data() != output.untyped_data()) {  // XLA did not alias them: start from output
    std::memcpy(out->untyped_data(), output.untyped_data(), output.size_bytes());
  }
  const ffi::AnyBuffer* indices[4] = {&input_offsets, &send_sizes, &output_offsets, &recv_sizes};
  return run_ragged(device, operand, leading(output), indices, out, groups, group_size, site,
                    lane, comm, false);
}

// The same, when the output operand was zeros: the lowering leaves it out, so XLA neither
// fills nor page-faults a buffer for it; the engine zeroes the rows nothing arrives at.
ffi::Future RaggedAllToAllIntoZerosImpl(int32_t device, OrderIn, ffi::AnyBuffer operand,
                                       ffi::AnyBuffer input_offsets, ffi::AnyBuffer send_sizes,
                                       ffi::AnyBuffer output_offsets, ffi::AnyBuffer recv_sizes,
                                       OrderOut, ffi::Result<ffi::AnyBuffer> out,
                                       ffi::Span<const int64_t> groups, int64_t group_size,
                                       int64_t site, int64_t lane, int64_t comm) {
  const ffi::AnyBuffer* indices[4] = {&input_offsets, &send_sizes, &output_offsets, &recv_sizes};
  return run_ragged(device, operand, leading(*out), indices, out, groups, group_size, site, lane,
                    comm, true);
}

}  // namespace
}  // namespace jaccl

// Every collective's binding starts the same: XLA's device id, the operand that orders the
// collectives of a device (handlers/order_operand.h), x; its order result, the result; the
// group table (device ids in rank order, group_size per row), the call site, its lane and
// the communicator's id (fixed at lowering: comm/communicator.h).
#define JACCL_CPU_BINDING                                      \
  ffi::Ffi::Bind()                                             \
      .Ctx<ffi::DeviceOrdinal>()                               \
      .Arg<ffi::AnyBuffer>()                                   \
      .Arg<ffi::AnyBuffer>()                                   \
      .Ret<ffi::AnyBuffer>()                                   \
      .Ret<ffi::AnyBuffer>()                                   \
      .Attr<ffi::Span<const int64_t>>("groups")                \
      .Attr<int64_t>("group_size")                             \
      .Attr<int64_t>("site")                                   \
      .Attr<int64_t>("lane")                                   \
      .Attr<int64_t>("comm")

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_all_reduce, jaccl::AllReduceImpl,
                              JACCL_CPU_BINDING.Attr<int64_t>("op")  // ReduceOp
                                  .Attr<int64_t>("algorithm"));      // Algorithm
XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_reduce_scatter, jaccl::ReduceScatterImpl,
                              JACCL_CPU_BINDING.Attr<int64_t>("op")
                                  .Attr<int64_t>("algorithm")
                                  .Attr<int64_t>("outer"));  // elements before the scatter dim
XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_all_gather, jaccl::AllGatherImpl,
                              JACCL_CPU_BINDING.Attr<int64_t>("algorithm")
                                  .Attr<int64_t>("outer"));  // elements before the gather dim
XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_all_to_all, jaccl::AllToAllImpl,
                              JACCL_CPU_BINDING.Attr<int64_t>("outer_in")  // before the split dim
                                  .Attr<int64_t>("outer_out"));            // before the concat dim
XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_ppermute, jaccl::PermuteImpl,
                              // (source, dest) ranks; a rank no pair sends to gets zeros
                              JACCL_CPU_BINDING.Attr<ffi::Span<const int64_t>>("perm"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_ragged_all_to_all, jaccl::RaggedAllToAllImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()  // orders the collectives of a device
                                  .Arg<ffi::AnyBuffer>()  // operand
                                  .Arg<ffi::AnyBuffer>()  // output (aliased to the result)
                                  .Arg<ffi::AnyBuffer>()  // input_offsets
                                  .Arg<ffi::AnyBuffer>()  // send_sizes
                                  .Arg<ffi::AnyBuffer>()  // output_offsets
                                  .Arg<ffi::AnyBuffer>()  // recv_sizes
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()  // output with the received rows
                                  .Attr<ffi::Span<const int64_t>>("groups")
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("site")
                                  .Attr<int64_t>("lane")
                                  .Attr<int64_t>("comm"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_ragged_all_to_all_into_zeros,
                              jaccl::RaggedAllToAllIntoZerosImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()  // orders the collectives of a device
                                  .Arg<ffi::AnyBuffer>()  // operand
                                  .Arg<ffi::AnyBuffer>()  // input_offsets
                                  .Arg<ffi::AnyBuffer>()  // send_sizes
                                  .Arg<ffi::AnyBuffer>()  // output_offsets
                                  .Arg<ffi::AnyBuffer>()  // recv_sizes
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()  // zeros with the received rows
                                  .Attr<ffi::Span<const int64_t>>("groups")
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("site")
                                  .Attr<int64_t>("lane")
                                  .Attr<int64_t>("comm"));
