#include "moe/run.h"

#include "moe/moe.h"

namespace jaccl {
namespace {

RowLists lists_of(const MoeRequest& c) {
  return RowLists{c.lists[kSendRows], c.lists[kSendOffsets],
                  c.list_counts[kSendRows], c.lists[kRecvRows],
                  c.lists[kRecvOffsets], c.list_counts[kRecvRows]};
}

void dispatch(Call& call, const MoeRequest& c) {
  for (size_t i = 0; i < c.topk_count; ++i) {
    if (c.topk_idx[i] < -1 || c.topk_idx[i] >= c.num_experts) {
      throw_error(ErrorKind::kInvalidArgument, "moe_dispatch: expert id ", c.topk_idx[i],
                  " at flat index ", i, " of topk_idx is out of range [-1, ", c.num_experts, ")");
    }
  }
  moe_dispatch(call, c.rows, c.rows_count, c.out, c.out_rows, c.row_elems, lists_of(c),
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
  if (args.pair_dot) {
    args.dout = c.extra;
  } else {
    args.weights = static_cast<const float*>(c.extra);
  }
  moe_combine(call, args, lists_of(c), moe_schedule());
}

}  // namespace

std::optional<Failure> run_moe(const MoeRequest& c) {
  return run_call(c.address, c.rows_count * c.row_elems, [&](Call& call) {
    check_moe_request(c, call.member->size);
    if (c.address.kind == CollectiveKind::kMoeDispatch) {
      dispatch(call, c);
    } else {
      combine(call, c);
    }
  });
}

}  // namespace jaccl
