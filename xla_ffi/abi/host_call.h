// A request as it crosses from one extension module to the other, field for field: a collective
// (collectives/request.h) as the C struct JacclHostCall, an MoE op (moe/request.h) as
// JacclHostMoeCall, point-to-point transfers as JacclHostP2p (abi/host_abi.h).
//
// Contract: request_of(host_call_of(r)) describes the same call as r (the pointers are
// shared, not copied); likewise moe_request_of(host_moe_call_of(r)), except the lane (the C
// struct has none: host jobs run in lane 0). p2p_request_of(c) copies the transfer lists (not
// the bytes they point to).
#pragma once

#include <cstring>
#include <vector>

#include "abi/host_abi.h"
#include "collectives/request.h"
#include "moe/request.h"

namespace jaccl {

inline JacclHostCall host_call_of(const CollectiveRequest& r) {
  JacclHostCall c;
  std::memset(&c, 0, sizeof c);
  c.kind = static_cast<int32_t>(r.kind);
  c.device = r.device;
  c.groups = r.groups;
  c.groups_len = r.groups_len;
  c.group_size = r.group_size;
  c.dtype = static_cast<int32_t>(r.dtype);
  c.op = static_cast<int32_t>(r.op);
  c.algorithm = static_cast<int32_t>(r.algorithm);
  c.in = r.in;
  c.out = r.out;
  c.in_count = r.in_count;
  c.out_count = r.out_count;
  c.outer_in = r.outer_in;
  c.outer_out = r.outer_out;
  c.perm = r.pairs;
  c.perm_len = r.pairs_len;
  for (int i = 0; i < 4; ++i) {
    c.ragged[i] = r.ragged[i].data;
    c.ragged_bytes[i] = r.ragged[i].bytes;
  }
  c.ragged_len = r.ragged[kInputOffsets].count;
  c.in_rows = r.in_rows;
  c.out_rows = r.out_rows;
  c.row_elems = r.row_elems;
  c.space = r.space;
  c.lane = r.lane;
  c.split_round = r.split_round;
  c.site = r.site;
  return c;
}

inline CollectiveRequest request_of(const JacclHostCall& c) {
  CollectiveRequest r;
  r.kind = static_cast<CollectiveKind>(c.kind);
  r.device = c.device;
  r.groups = c.groups;
  r.groups_len = c.groups_len;
  r.group_size = c.group_size;
  r.dtype = static_cast<Dtype>(c.dtype);
  r.op = static_cast<ReduceOp>(c.op);
  r.algorithm = static_cast<Algorithm>(c.algorithm);
  r.in = c.in;
  r.out = c.out;
  r.in_count = c.in_count;
  r.out_count = c.out_count;
  r.outer_in = c.outer_in;
  r.outer_out = c.outer_out;
  r.pairs = c.perm;
  r.pairs_len = c.perm_len;
  for (int i = 0; i < 4; ++i) r.ragged[i] = IndexArray{c.ragged[i], c.ragged_len, c.ragged_bytes[i]};
  r.in_rows = c.in_rows;
  r.out_rows = c.out_rows;
  r.row_elems = c.row_elems;
  r.space = c.space;
  r.lane = c.lane;
  r.split_round = c.split_round;
  r.site = c.site;
  return r;
}

inline JacclHostMoeCall host_moe_call_of(const MoeRequest& r) {
  JacclHostMoeCall c;
  std::memset(&c, 0, sizeof c);
  c.kind = static_cast<int32_t>(r.kind);
  c.device = r.device;
  c.groups = r.groups;
  c.groups_len = r.groups_len;
  c.group_size = r.group_size;
  c.dtype = static_cast<int32_t>(r.dtype);
  c.rows = r.rows;
  c.rows_count = r.rows_count;
  c.row_elems = r.row_elems;
  for (int i = 0; i < 4; ++i) {
    c.lists[i] = r.lists[i];
    c.list_counts[i] = r.list_counts[i];
  }
  c.topk_idx = r.topk_idx;
  c.topk_count = r.topk_count;
  c.num_experts = r.num_experts;
  c.extra = r.extra;
  c.extra_count = r.extra_count;
  c.extra_dtype = static_cast<int32_t>(r.extra_dtype);
  c.topk = r.topk;
  c.pair_dot = r.pair_dot ? 1 : 0;
  c.out = r.out;
  c.out_rows = r.out_rows;
  c.out_count = r.out_count;
  c.site = r.site;
  return c;
}

inline MoeRequest moe_request_of(const JacclHostMoeCall& c) {
  MoeRequest r;
  r.kind = static_cast<CollectiveKind>(c.kind);
  r.device = c.device;
  r.groups = c.groups;
  r.groups_len = c.groups_len;
  r.group_size = c.group_size;
  r.dtype = static_cast<Dtype>(c.dtype);
  r.rows = c.rows;
  r.rows_count = c.rows_count;
  r.row_elems = c.row_elems;
  for (int i = 0; i < 4; ++i) {
    r.lists[i] = c.lists[i];
    r.list_counts[i] = c.list_counts[i];
  }
  r.topk_idx = c.topk_idx;
  r.topk_count = c.topk_count;
  r.num_experts = c.num_experts;
  r.extra = c.extra;
  r.extra_count = c.extra_count;
  r.extra_dtype = static_cast<Dtype>(c.extra_dtype);
  r.topk = c.topk;
  r.pair_dot = c.pair_dot != 0;
  r.out = c.out;
  r.out_rows = c.out_rows;
  r.out_count = c.out_count;
  r.site = c.site;
  return r;
}

inline PointToPointRequest p2p_request_of(const JacclHostP2p& c) {
  auto transfers = [](const JacclTransfer* list, size_t n) {
    std::vector<Transfer> out(n);
    for (size_t i = 0; i < n; ++i) {
      out[i] = Transfer{static_cast<int>(list[i].peer), list[i].data,
                        static_cast<size_t>(list[i].bytes)};
    }
    return out;
  };
  PointToPointRequest r;
  r.kind = CollectiveKind::kPointToPoint;
  r.dtype = Dtype::kU8;
  r.device = c.device;
  r.groups = c.group;
  r.groups_len = c.group_size;
  r.group_size = static_cast<int64_t>(c.group_size);
  r.sends = transfers(c.sends, c.num_sends);
  r.receives = transfers(c.receives, c.num_receives);
  r.space = c.space;
  r.split_round = c.split_round;
  return r;
}

}  // namespace jaccl
