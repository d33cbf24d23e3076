#include "collectives/run.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/call_times.h"
#include "collectives/direct.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/memory.h"
#include "common/reduce.h"
#include "common/text.h"

namespace jaccl {
namespace {

// Logs the transport and algorithm once per communicator, op and size class.
void log_choice(const Call& call, size_t bytes) {
  if (log_level() < LogLevel::kInfo) return;
  const int size_class = jaccl::size_class(bytes);
  if (!first_time(text(call.comm->id(), '/', static_cast<int>(call.kind), '/', size_class, '/',
                       call.member->rank))) {
    return;
  }
  std::string transports;
  for (size_t r = 0; r < call.member->to.size(); ++r) {
    if (call.member->to[r]) {
      append(transports, transports.empty() ? "" : ",", call.member->to[r]->kind());
    }
  }
  log(LogLevel::kInfo, kind_name(call.kind), " ", bytes, " B (<= 2^", size_class, ") on rank ",
      call.member->rank, "/", call.member->size, " of communicator ", hex(call.comm->id()),
      call.comm->space_label(), ": algorithm ", algorithm_name(call.algorithm), ", transports ",
      transports.empty() ? "none" : transports);
}

// Resolves the algorithm and runs one checked collective on host buffers (throws).
void run_checked(Call& call, const Buffers& buffers) {
  call.op = buffers.op;
  const CollectiveKind kind = buffers.address.kind;
  Communicator::Member& member = *call.member;
  const size_t esize = dtype_size(call.dtype);
  const bool moves_blocks = kind != CollectiveKind::kPermute &&
                            kind != CollectiveKind::kRaggedAllToAll;
  if (member.size == 1 && moves_blocks) {
    // A group of one: the input is the output, as a fold of one operand (a float sum of -0
    // is +0, a max or min of NaN -inf or +inf: common/reduce_apply.h).
    if (reduces(kind)) {
      const Operand in{buffers.in, call.dtype};
      combine(call.op, call.dtype, buffers.out, call.dtype, &in, 1, buffers.in_count);
    } else if (buffers.out != buffers.in) {
      std::memcpy(buffers.out, buffers.in, buffers.in_count * esize);
    }
    return;
  }
  const size_t bytes = std::max(buffers.in_count, buffers.out_count) * esize;
  if (buffers.out != buffers.in) prefer_huge_pages(buffers.out, buffers.out_count * esize);
  GroupShape shape{member.size, member.direct != nullptr, member.hierarchical,
                   member.process_run > 0, member.num_hosts == 1, !is_float(call.dtype)};
  call.algorithm = choose_algorithm(kind, buffers.algorithm, bytes, shape);
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
      case CollectiveKind::kPermute: permute(call, buffers); break;
      case CollectiveKind::kRaggedAllToAll: ragged_all_to_all(call, buffers); break;
      default: throw_error(ErrorKind::kInvalidArgument, "not a collective: ", kind_name(kind));
    }
  }
  const double seconds = seconds_since(start);
  record_call_time(buffers.address.device, seconds);
  log(LogLevel::kTrace, kind_name(kind), " #", call.seq, " ", bytes, " B on rank ", member.rank,
      " of communicator ", hex(call.comm->id()), call.comm->space_label(), ": ",
      algorithm_name(call.algorithm), " ", seconds * 1e6, " us");
}

}  // namespace

std::optional<Failure> run_collective(const CollectiveRequest& r) {
  return run_call(r.address, r.in_count, [&](Call& call) {
    const int n = call.member->size;
    Buffers buffers;
    static_cast<CollectiveRequest&>(buffers) = r;
    buffers.permutation = check_request(r, n, call.member->rank);
    std::vector<int64_t> widened[4];
    if (r.address.kind == CollectiveKind::kRaggedAllToAll) {
      for (int i = 0; i < 4; ++i) {
        widened[i].resize(r.ragged[i].count);
        widen(r.ragged[i], widened[i].data());
      }
      buffers.ragged_rows = RaggedRows{widened[0].data(), widened[1].data(), widened[2].data(),
                                       widened[3].data(), static_cast<int>(widened[0].size() / n)};
    }
    run_checked(call, buffers);
  });
}

std::optional<Failure> run_point_to_point(const PointToPointRequest& r) {
  // bytes: no count to compare (each pair's sizes are checked as they meet)
  return run_call(r.address, 0, [&](Call& call) { point_to_point(call, r.sends, r.receives); });
}

}  // namespace jaccl
