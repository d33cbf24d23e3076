// The MoE request (moe/request.h) every MoE handler, CPU or CUDA, starts from XLA's buffers.
//
// Contract: moe_request() fills kind, group, site and lane (from the `lane` attribute:
// handlers/order_operand.h), the rows (leading dimension rows, the rest per row), the four
// int32 routing lists in moe/request.h's order, and the output; the caller sets the kind's own
// fields.
#pragma once

#include <cstdint>

#include "handlers/buffer_shape.h"
#include "handlers/order_operand.h"
#include "moe/request.h"
#include "xla/ffi/api/ffi.h"

namespace jaccl {

using MoeList32 = xla::ffi::Buffer<xla::ffi::DataType::S32>;

inline MoeRequest moe_request(CollectiveKind kind, int64_t device,
                              xla::ffi::Span<const int64_t> groups, int64_t group_size,
                              int64_t site, int64_t lane, int64_t comm, Dtype dtype,
                              const xla::ffi::AnyBuffer& rows,
                              const MoeList32* const lists[4], xla::ffi::AnyBuffer& out) {
  MoeRequest r;
  r.address.kind = kind;
  r.address.dtype = dtype;
  r.address.device = device;
  r.address.groups = groups.begin();
  r.address.groups_len = groups.size();
  r.address.group_size = group_size;
  r.address.lane = lane_of_attribute(lane);
  r.address.site = static_cast<uint32_t>(site);
  r.address.comm = static_cast<uint64_t>(comm);
  r.rows = rows.untyped_data();
  r.rows_count = leading(rows);
  r.row_elems = trailing(rows);
  for (int i = 0; i < 4; ++i) {
    r.lists[i] = lists[i]->typed_data();
    r.list_counts[i] = lists[i]->element_count();
  }
  r.out = out.untyped_data();
  r.out_rows = leading(out);
  r.out_count = out.element_count();
  return r;
}

}  // namespace jaccl
