#include "moe/run.h"

#include "moe/moe.h"

namespace jaccl {
namespace {

RowLists lists_of(const Call& call, const MoeRequest& c) {
  const size_t n = static_cast<size_t>(call.member->size) + 1;
  if (c.list_counts[kSendOffsets] != n || c.list_counts[kRecvOffsets] != n) {
    throw_error(ErrorKind::kInvalidArgument, "MoE offsets need ", n, " entries (group size + 1)");
  }
  return RowLists{c.lists[kSendRows], c.lists[kSendOffsets],
                  c.list_counts[kSendRows], c.lists[kRecvRows],
                  c.lists[kRecvOffsets], c.list_counts[kRecvRows]};
}

void exchange(Call& call, const MoeRequest& c) {
  for (size_t i = 0; i < c.topk_count; ++i) {
    if (c.topk_idx[i] < -1 || c.topk_idx[i] >= c.num_experts) {
      throw_error(ErrorKind::kInvalidArgument, "moe_dispatch: expert id ", c.topk_idx[i],
                  " at flat index ", i, " of topk_idx is out of range [-1, ", c.num_experts, ")");
    }
  }
  if (c.out_rows * c.row_elems != c.out_count) {
    throw_error(ErrorKind::kInvalidArgument, "MoE exchange rows differ in length");
  }
  moe_exchange(call, c.rows, c.rows_count, c.out, c.out_rows, c.row_elems, lists_of(call, c),
               moe_schedule());
}

void combine(Call& call, const MoeRequest& c) {
  CombineArgs args;
  args.y = c.rows;
  args.y_rows = c.rows_count;
  args.row_elems = c.row_elems;
  args.topk = static_cast<size_t>(c.topk);
  args.tokens = c.out_rows;
  args.out = c.out;
  args.pair_dot = c.pair_dot;
  if (c.out_count != args.tokens * (args.pair_dot ? args.topk : args.row_elems)) {
    throw_error(ErrorKind::kInvalidArgument, "moe_combine: the output must be [tokens, ",
                args.pair_dot ? "k" : "hidden", "]");
  }
  if (args.pair_dot) {
    if (c.extra_dtype != c.dtype || c.extra_count != args.tokens * args.row_elems) {
      throw_error(ErrorKind::kInvalidArgument,
                  "moe pair_dot: dout must be [tokens, hidden] of y's dtype");
    }
    args.dout = c.extra;
  } else {
    if (c.extra_dtype != Dtype::kF32 || c.extra_count != args.tokens * args.topk) {
      throw_error(ErrorKind::kInvalidArgument, "moe_combine: topk_weights must be float32 [tokens, k]");
    }
    args.weights = static_cast<const float*>(c.extra);
  }
  moe_combine(call, args, lists_of(call, c), moe_schedule());
}

}  // namespace

std::optional<Failure> run_moe(const MoeRequest& c) {
  return run_call(c.kind, c.device, c.groups, c.groups_len, c.group_size, c.dtype,
                  c.rows_count * c.row_elems, [&](Call& call) {
    if (c.kind == CollectiveKind::kMoeDispatch) {
      exchange(call, c);
    } else {
      combine(call, c);
    }
  }, 0, c.lane, c.site);
}

}  // namespace jaccl
