#include "collectives/run.h"

#include <algorithm>
#include <cstring>

#include "collectives/direct.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/memory.h"
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

}  // namespace

void run_host_collective(Call& call, CollectiveKind kind, const Buffers& buffers, int64_t op,
                         int64_t algorithm) {
  call.op = static_cast<ReduceOp>(op);
  Communicator::Member& member = *call.member;
  const size_t esize = dtype_size(call.dtype);
  const bool moves_blocks = kind != CollectiveKind::kPermute &&
                            kind != CollectiveKind::kRaggedAllToAll;
  if (member.size == 1 && moves_blocks) {
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
      case CollectiveKind::kPermute: permute(call, buffers); break;
      case CollectiveKind::kRaggedAllToAll: ragged_all_to_all(call, buffers); break;
      default: throw_error(ErrorKind::kInvalidArgument, "not a collective: ", kind_name(kind));
    }
  }
  log(LogLevel::kTrace, kind_name(kind), " #", call.seq, " ", bytes, " B on rank ", member.rank,
      ": ", algorithm_name(call.algorithm), " ", seconds_since(start) * 1e6, " us");
}

Permutation permutation_of(const Call& call, const int64_t* pairs, size_t len) {
  const int n = call.member->size, r = call.member->rank;
  if (len % 2 != 0) throw_error(ErrorKind::kInvalidArgument, "ppermute: odd pair list");
  Permutation p;
  for (size_t i = 0; i < len; i += 2) {
    const int64_t source = pairs[i], dest = pairs[i + 1];
    if (source < 0 || source >= n || dest < 0 || dest >= n) {
      throw_error(ErrorKind::kInvalidArgument, "ppermute: pair (", source, ", ", dest,
                  ") is outside a group of ", n);
    }
    if (source == r) p.send_to = static_cast<int>(dest);
    if (dest == r) p.receive_from = static_cast<int>(source);
  }
  return p;
}

RaggedRows ragged_rows(const Call& call, const int64_t* const arrays[4], size_t entries,
                       size_t row_elems, size_t in_rows, size_t out_rows) {
  const int n = call.member->size;
  if (entries == 0 || entries % n != 0) {
    throw_error(ErrorKind::kInvalidArgument, "ragged_all_to_all: ", entries, " entries per "
                "index array for a group of ", n, " (they need a multiple of it)");
  }
  return RaggedRows{arrays[0], arrays[1], arrays[2], arrays[3], static_cast<int>(entries / n),
                    row_elems, in_rows, out_rows};
}

}  // namespace jaccl
