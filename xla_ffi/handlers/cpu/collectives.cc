// XLA FFI handlers for the CPU collectives: XLA buffers and attributes in, an engine call
// (collectives/run.h) on the calling device thread, an ffi::Error out.
//
// Contract: one handler per collective, all with the same shape: the device ordinal (XLA's
// global device id) finds the device's group and rank in the communicator named by the
// `groups` table; any failure is returned as an ffi::Error (after telling the peers through
// the abort board), never thrown or aborted.
#include <cstring>
#include <vector>

#include "collectives/run.h"
#include "common/memory.h"
#include "handlers/buffer_shape.h"
#include "handlers/call_setup.h"
#include "handlers/cpu/symbols.h"
#include "handlers/order_operand.h"
#include "handlers/ragged_indices.h"
#include "handlers/xla_dtype.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaccl {
namespace {

ffi::Error run_collective(CollectiveKind kind, int64_t device, ffi::AnyBuffer in,
                          ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                          int64_t group_size, int64_t op, int64_t algorithm, int64_t outer_in,
                          int64_t outer_out) {
  Dtype dtype;
  if (!dtype_of_xla(in.element_type(), &dtype)) return unsupported_type(kind, in.element_type());
  return with_call(kind, device, groups, group_size, dtype, in.element_count(), [&](Call& call) {
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

ffi::Error PermuteImpl(int32_t device, OrderIn, ffi::AnyBuffer x, OrderOut,
                       ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                       int64_t group_size, ffi::Span<const int64_t> perm) {
  Dtype dtype;
  if (!dtype_of_xla(x.element_type(), &dtype)) {
    return unsupported_type(CollectiveKind::kPermute, x.element_type());
  }
  return with_call(CollectiveKind::kPermute, device, groups, group_size, dtype, x.element_count(),
                   [&](Call& call) {
    Buffers buffers;
    buffers.in = x.untyped_data();
    buffers.out = out->untyped_data();
    buffers.in_count = x.element_count();
    buffers.out_count = out->element_count();
    buffers.permutation = permutation_of(call, perm.begin(), perm.size());
    run_host_collective(call, CollectiveKind::kPermute, buffers,
                        static_cast<int64_t>(ReduceOp::kSum), 0);
  });
}

// One of ragged_all_to_all's offset or size arrays (int32 or int64, a multiple of the group
// size entries, as many as the others).
std::vector<int64_t> ragged_entries(const ffi::AnyBuffer& b, const char* name, int n,
                                    size_t entries) {
  if (b.element_count() != entries || entries == 0 || entries % n != 0) {
    throw_error(ErrorKind::kInvalidArgument, "ragged_all_to_all: ", name, " has ",
                b.element_count(), " entries, input_offsets ", entries,
                ": they need the same number, a multiple of the group size ", n);
  }
  std::vector<int64_t> v;
  if (!widen_indices(b.untyped_data(), b.element_type(), entries, &v)) {
    throw_error(ErrorKind::kInvalidArgument, "ragged_all_to_all: ", name, " must be int32 or int64");
  }
  return v;
}

// ragged_all_to_all into `out`, which holds the output operand's rows already (aliased) or,
// with zero_unwritten, nothing yet.
ffi::Error run_ragged(int32_t device, const ffi::AnyBuffer& operand, size_t out_rows,
                      const ffi::AnyBuffer* const indices[4], ffi::Result<ffi::AnyBuffer>& out,
                      ffi::Span<const int64_t> groups, int64_t group_size, bool zero_unwritten) {
  Dtype dtype;
  if (!dtype_of_xla(operand.element_type(), &dtype) ||
      out->element_type() != operand.element_type()) {
    return unsupported_type(CollectiveKind::kRaggedAllToAll, operand.element_type());
  }
  return with_call(CollectiveKind::kRaggedAllToAll, device, groups, group_size, dtype,
                   operand.element_count(), [&](Call& call) {
    const int n = call.member->size;
    const size_t entries = indices[0]->element_count();
    static const char* const names[4] = {"input_offsets", "send_sizes", "output_offsets",
                                         "recv_sizes"};
    std::vector<int64_t> widened[4];
    const int64_t* arrays[4];
    for (int i = 0; i < 4; ++i) {
      widened[i] = ragged_entries(*indices[i], names[i], n, entries);
      arrays[i] = widened[i].data();
    }
    if (trailing(operand) != trailing(*out)) {
      throw_error(ErrorKind::kInvalidArgument, "ragged_all_to_all: the operand's and the "
                  "output's rows differ in length");
    }
    Buffers buffers;
    buffers.in = operand.untyped_data();
    buffers.out = out->untyped_data();
    buffers.in_count = operand.element_count();
    buffers.out_count = out->element_count();
    buffers.ragged = ragged_rows(call, arrays, entries, trailing(operand), leading(operand),
                                 out_rows);
    buffers.ragged.zero_unwritten = zero_unwritten;
    if (zero_unwritten) prefer_huge_pages(buffers.out, out->size_bytes());
    run_host_collective(call, CollectiveKind::kRaggedAllToAll, buffers,
                        static_cast<int64_t>(ReduceOp::kSum), 0);
  });
}

ffi::Error RaggedAllToAllImpl(int32_t device, OrderIn, ffi::AnyBuffer operand,
                              ffi::AnyBuffer output, ffi::AnyBuffer input_offsets,
                              ffi::AnyBuffer send_sizes, ffi::AnyBuffer output_offsets,
                              ffi::AnyBuffer recv_sizes, OrderOut, ffi::Result<ffi::AnyBuffer> out,
                              ffi::Span<const int64_t> groups, int64_t group_size) {
  if (output.element_count() != out->element_count() ||
      output.element_type() != out->element_type()) {
    return ffi::Error::InvalidArgument("jaccl: ragged_all_to_all's output and result differ");
  }
  if (out->untyped_data() != output.untyped_data()) {  // XLA did not alias them: start from output
    std::memcpy(out->untyped_data(), output.untyped_data(), output.size_bytes());
  }
  const ffi::AnyBuffer* indices[4] = {&input_offsets, &send_sizes, &output_offsets, &recv_sizes};
  return run_ragged(device, operand, leading(output), indices, out, groups, group_size, false);
}

// The same, when the output operand was zeros: the lowering leaves it out, so XLA neither
// fills nor page-faults a buffer for it; the engine zeroes the rows nothing arrives at.
ffi::Error RaggedAllToAllIntoZerosImpl(int32_t device, OrderIn, ffi::AnyBuffer operand,
                                       ffi::AnyBuffer input_offsets, ffi::AnyBuffer send_sizes,
                                       ffi::AnyBuffer output_offsets, ffi::AnyBuffer recv_sizes,
                                       OrderOut, ffi::Result<ffi::AnyBuffer> out,
                                       ffi::Span<const int64_t> groups, int64_t group_size) {
  const ffi::AnyBuffer* indices[4] = {&input_offsets, &send_sizes, &output_offsets, &recv_sizes};
  return run_ragged(device, operand, leading(*out), indices, out, groups, group_size, true);
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
                                  .Attr<int64_t>("group_size"));

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
                                  .Attr<int64_t>("group_size"));

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
