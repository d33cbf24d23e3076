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
#include "comm/lanes.h"
#include "common/memory.h"
#include "handlers/buffer_shape.h"
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

// One engine call for `device` over the communicator of `groups` in the lane the `site`
// attribute names (comm/lanes.h): at once, or queued on the lane's thread (async_call.h).
// Bodies capture data pointers and counts, never XLA's views; a queued call takes a copy of
// the table.
template <typename Body>
ffi::Future engine_call(CollectiveKind kind, int64_t device, ffi::Span<const int64_t> groups,
                        int64_t group_size, int64_t site, Dtype dtype, uint64_t op_count,
                        size_t bytes, Body body) {
  const uint32_t at = site_of_attribute(site), lane = lane_of_attribute(site);
  if (runs_now(device, lane, bytes)) {
    return completed(to_ffi(run_call(kind, device, groups.begin(), groups.size(), group_size,
                                     dtype, op_count, body, 0, lane, at)));
  }
  std::vector<int64_t> table(groups.begin(), groups.end());
  return queue(device, lane, [=]() mutable {  // bodies may fill in their Buffers
    return run_call(kind, device, table.data(), table.size(), group_size, dtype, op_count,
                    [&](Call& call) { body(call); }, 0, lane, at);
  });
}

// The input and output of a call, as the engine takes them.
Buffers in_and_out(const ffi::AnyBuffer& in, ffi::Result<ffi::AnyBuffer>& out) {
  Buffers buffers;
  buffers.in = in.untyped_data();
  buffers.out = out->untyped_data();
  buffers.in_count = in.element_count();
  buffers.out_count = out->element_count();
  return buffers;
}

ffi::Future run_collective(CollectiveKind kind, int64_t device, ffi::AnyBuffer in,
                           ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                           int64_t group_size, int64_t site, int64_t op, int64_t algorithm,
                           int64_t outer_in, int64_t outer_out) {
  Dtype dtype;
  if (!dtype_of_xla(in.element_type(), &dtype)) {
    return completed(unsupported_type(kind, in.element_type()));
  }
  Buffers buffers = in_and_out(in, out);
  buffers.outer_in = static_cast<size_t>(outer_in);
  buffers.outer_out = static_cast<size_t>(outer_out);
  return engine_call(kind, device, groups, group_size, site, dtype, in.element_count(),
                     std::max(in.size_bytes(), out->size_bytes()), [=](Call& call) {
    run_host_collective(call, kind, buffers, op, algorithm);
  });
}

ffi::Future AllReduceImpl(int32_t device, OrderIn, ffi::AnyBuffer x, OrderOut,
                         ffi::Result<ffi::AnyBuffer> out,
                         ffi::Span<const int64_t> groups, int64_t group_size, int64_t site,
                         int64_t op, int64_t algorithm) {
  return run_collective(CollectiveKind::kAllReduce, device, x, out, groups, group_size, site, op,
                        algorithm, 1, 1);
}

ffi::Future ReduceScatterImpl(int32_t device, OrderIn, ffi::AnyBuffer x, OrderOut,
                             ffi::Result<ffi::AnyBuffer> out,
                             ffi::Span<const int64_t> groups, int64_t group_size,
                             int64_t site, int64_t op, int64_t algorithm, int64_t outer) {
  return run_collective(CollectiveKind::kReduceScatter, device, x, out, groups, group_size, site,
                        op, algorithm, outer, 1);
}

ffi::Future AllGatherImpl(int32_t device, OrderIn, ffi::AnyBuffer x, OrderOut,
                         ffi::Result<ffi::AnyBuffer> out,
                         ffi::Span<const int64_t> groups, int64_t group_size, int64_t site,
                         int64_t algorithm, int64_t outer) {
  return run_collective(CollectiveKind::kAllGather, device, x, out, groups, group_size, site,
                        static_cast<int64_t>(ReduceOp::kSum), algorithm, 1, outer);
}

ffi::Future AllToAllImpl(int32_t device, OrderIn, ffi::AnyBuffer x, OrderOut,
                        ffi::Result<ffi::AnyBuffer> out,
                        ffi::Span<const int64_t> groups, int64_t group_size, int64_t site,
                        int64_t outer_in, int64_t outer_out) {
  return run_collective(CollectiveKind::kAllToAll, device, x, out, groups, group_size, site,
                        static_cast<int64_t>(ReduceOp::kSum), 0, outer_in, outer_out);
}

ffi::Future PermuteImpl(int32_t device, OrderIn, ffi::AnyBuffer x, OrderOut,
                       ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                       int64_t group_size, int64_t site, ffi::Span<const int64_t> perm) {
  Dtype dtype;
  if (!dtype_of_xla(x.element_type(), &dtype)) {
    return completed(unsupported_type(CollectiveKind::kPermute, x.element_type()));
  }
  Buffers buffers = in_and_out(x, out);
  std::vector<int64_t> pairs(perm.begin(), perm.end());
  return engine_call(CollectiveKind::kPermute, device, groups, group_size, site, dtype,
                     x.element_count(), x.size_bytes(), [=](Call& call) mutable {
    buffers.permutation = permutation_of(call, pairs.data(), pairs.size());
    run_host_collective(call, CollectiveKind::kPermute, buffers,
                        static_cast<int64_t>(ReduceOp::kSum), 0);
  });
}

// One of ragged_all_to_all's offset or size arrays (int32 or int64), as a call keeps it.
struct IndexArray {
  const void* data;
  size_t count;
  ffi::DataType type;
  explicit IndexArray(const ffi::AnyBuffer& b)
      : data(b.untyped_data()), count(b.element_count()), type(b.element_type()) {}
};

// Its entries, widened: a multiple of the group size, as many as the others.
std::vector<int64_t> ragged_entries(const IndexArray& b, const char* name, int n,
                                    size_t entries) {
  if (b.count != entries || entries == 0 || entries % n != 0) {
    throw_error(ErrorKind::kInvalidArgument, "ragged_all_to_all: ", name, " has ",
                b.count, " entries, input_offsets ", entries,
                ": they need the same number, a multiple of the group size ", n);
  }
  std::vector<int64_t> v;
  if (!widen_indices(b.data, b.type, entries, &v)) {
    throw_error(ErrorKind::kInvalidArgument, "ragged_all_to_all: ", name, " must be int32 or int64");
  }
  return v;
}

// The four index arrays of a ragged_all_to_all: input_offsets, send_sizes, output_offsets,
// recv_sizes.
struct RaggedIndices {
  RaggedIndices(const ffi::AnyBuffer& input_offsets, const ffi::AnyBuffer& send_sizes,
                const ffi::AnyBuffer& output_offsets, const ffi::AnyBuffer& recv_sizes)
      : arrays{IndexArray(input_offsets), IndexArray(send_sizes), IndexArray(output_offsets),
               IndexArray(recv_sizes)} {}
  IndexArray arrays[4];
};

// ragged_all_to_all into `out`, which holds the output operand's rows already (aliased) or,
// with zero_unwritten, nothing yet.
ffi::Future run_ragged(int32_t device, ffi::AnyBuffer operand, size_t out_rows,
                       RaggedIndices indices, ffi::Result<ffi::AnyBuffer> out,
                       ffi::Span<const int64_t> groups, int64_t group_size, int64_t site,
                       bool zero_unwritten) {
  Dtype dtype;
  if (!dtype_of_xla(operand.element_type(), &dtype) ||
      out->element_type() != operand.element_type()) {
    return completed(unsupported_type(CollectiveKind::kRaggedAllToAll, operand.element_type()));
  }
  Buffers buffers = in_and_out(operand, out);
  const size_t row_elems = trailing(operand), in_rows = leading(operand);
  const size_t out_row_elems = trailing(*out);
  const size_t out_bytes = out->size_bytes();
  return engine_call(CollectiveKind::kRaggedAllToAll, device, groups, group_size, site, dtype,
                     operand.element_count(), std::max(operand.size_bytes(), out_bytes),
                     [=](Call& call) mutable {
    const int n = call.member->size;
    const size_t entries = indices.arrays[0].count;
    static const char* const names[4] = {"input_offsets", "send_sizes", "output_offsets",
                                         "recv_sizes"};
    std::vector<int64_t> widened[4];
    const int64_t* arrays[4];
    for (int i = 0; i < 4; ++i) {
      widened[i] = ragged_entries(indices.arrays[i], names[i], n, entries);
      arrays[i] = widened[i].data();
    }
    if (row_elems != out_row_elems) {
      throw_error(ErrorKind::kInvalidArgument, "ragged_all_to_all: the operand's and the "
                  "output's rows differ in length");
    }
    buffers.ragged = ragged_rows(call, arrays, entries, row_elems, in_rows, out_rows);
    buffers.ragged.zero_unwritten = zero_unwritten;
    if (zero_unwritten) prefer_huge_pages(buffers.out, out_bytes);
    run_host_collective(call, CollectiveKind::kRaggedAllToAll, buffers,
                        static_cast<int64_t>(ReduceOp::kSum), 0);
  });
}

ffi::Future RaggedAllToAllImpl(int32_t device, OrderIn, ffi::AnyBuffer operand,
                              ffi::AnyBuffer output, ffi::AnyBuffer input_offsets,
                              ffi::AnyBuffer send_sizes, ffi::AnyBuffer output_offsets,
                              ffi::AnyBuffer recv_sizes, OrderOut, ffi::Result<ffi::AnyBuffer> out,
                              ffi::Span<const int64_t> groups, int64_t group_size, int64_t site) {
  if (output.element_count() != out->element_count() ||
      output.element_type() != out->element_type()) {
    return completed(ffi::Error::InvalidArgument(
        "jaccl: ragged_all_to_all's output and result differ"));
  }
  if (out->untyped_data() != output.untyped_data()) {  // XLA did not alias them: start from output
    std::memcpy(out->untyped_data(), output.untyped_data(), output.size_bytes());
  }
  RaggedIndices indices(input_offsets, send_sizes, output_offsets, recv_sizes);
  return run_ragged(device, operand, leading(output), indices, out, groups, group_size, site,
                    false);
}

// The same, when the output operand was zeros: the lowering leaves it out, so XLA neither
// fills nor page-faults a buffer for it; the engine zeroes the rows nothing arrives at.
ffi::Future RaggedAllToAllIntoZerosImpl(int32_t device, OrderIn, ffi::AnyBuffer operand,
                                       ffi::AnyBuffer input_offsets, ffi::AnyBuffer send_sizes,
                                       ffi::AnyBuffer output_offsets, ffi::AnyBuffer recv_sizes,
                                       OrderOut, ffi::Result<ffi::AnyBuffer> out,
                                       ffi::Span<const int64_t> groups, int64_t group_size,
                                       int64_t site) {
  RaggedIndices indices(input_offsets, send_sizes, output_offsets, recv_sizes);
  return run_ragged(device, operand, leading(*out), indices, out, groups, group_size, site, true);
}

}  // namespace
}  // namespace jaccl

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_ppermute, jaccl::PermuteImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()  // orders the collectives of a device
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()  // the source's x, or zeros
                                  .Attr<ffi::Span<const int64_t>>("groups")
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("site")
                                  .Attr<ffi::Span<const int64_t>>("perm"));  // (source, dest) ranks

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
                                  .Attr<int64_t>("site"));

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
                                  .Attr<int64_t>("site"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_all_reduce, jaccl::AllReduceImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()  // orders the collectives of a device
                                  .Arg<ffi::AnyBuffer>()                   // x
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()                   // reduced x
                                  .Attr<ffi::Span<const int64_t>>("groups")  // device ids, rank order
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("site")
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
                                  .Attr<int64_t>("site")
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
                                  .Attr<int64_t>("site")
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
                                  .Attr<int64_t>("site")
                                  .Attr<int64_t>("outer_in")    // elements before the split dim
                                  .Attr<int64_t>("outer_out"));  // elements before the concat dim
