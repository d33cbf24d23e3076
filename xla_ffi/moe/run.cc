#include "moe/run.h"

#include "moe/moe.h"

namespace jaccl {
namespace {

void dispatch(Call& call, const MoeRequest& c) {
  for (size_t i = 0; i < c.topk_count; ++i) {
    if (c.topk_idx[i] < -1 || c.topk_idx[i] >= c.num_experts) {
      throw_error(ErrorKind::kInvalidArgument, "moe_dispatch: expert id ", c.topk_idx[i],
                  " at flat index ", i, " of topk_idx is out of range [-1, ", c.num_experts, ")");
    }
  }
  moe_dispatch(call, c, moe_schedule());
}

}  // namespace

std::optional<Failure> run_moe(const MoeRequest& c) {
  return run_call(c.address, c.rows_count * c.row_elems, [&](Call& call) {
    check_moe_request(c, call.member->size);
    if (c.address.kind == CollectiveKind::kMoeDispatch) {
      dispatch(call, c);
    } else {
      moe_combine(call, c, moe_schedule());
    }
  });
}

}  // namespace jaccl
