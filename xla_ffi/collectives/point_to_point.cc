// Point-to-point transfers: bytes sent to and received from ranks of a group with no
// collective around them (MPI_Sendrecv, MPI_Isend/Irecv as XLA:CPU's 'mpi' collectives issue
// them for all-to-all and collective-permute).
//
// Schedule: one phase, a task per transfer, all in flight at once (a rank that sends to one
// peer while it receives from another never waits for either to finish first). A transfer is
// not numbered by the group's collective count (ranks that take no part never call) but by
// the pair: the k-th stream from rank a to rank b has tag k on both ends (member.sent[b] at a,
// member.received[a] at b), so the two ends agree on which message is which, and a receive of
// another size than was sent is an error naming both ranks.
#include "collectives/collectives.h"
#include "collectives/streams.h"
#include "common/error.h"
#include "common/log.h"
#include "common/text.h"

namespace jaccl {

void point_to_point(Call& call, const std::vector<Transfer>& sends,
                    const std::vector<Transfer>& receives) {
  Communicator::Member& m = *call.member;
  if (m.sent.size() != static_cast<size_t>(m.size)) {
    m.sent.assign(m.size, 0);
    m.received.assign(m.size, 0);
  }
  auto check = [&](const Transfer& t, const char* what) {
    if (t.peer < 0 || t.peer >= m.size || t.peer == m.rank) {
      throw_error(ErrorKind::kInvalidArgument, "point-to-point: ", what, " rank ", t.peer,
                  " of a group of ", m.size, " from rank ", m.rank);
    }
  };
  Phase phase;
  for (const Transfer& t : sends) {
    check(t, "send to");
    Task task;
    task.count = t.bytes;
    task.srcs = {Endpoint::local(Region::contiguous(t.data, 1, t.bytes), Dtype::kU8)};
    task.sinks = {send_to(call, t.peer, m.sent[t.peer]++, Dtype::kU8)};
    phase.push_back(std::move(task));
  }
  for (const Transfer& t : receives) {
    check(t, "receive from");
    Task task;
    task.count = t.bytes;
    task.srcs = {receive_from(call, t.peer, m.received[t.peer]++, Dtype::kU8)};
    task.sinks = {Endpoint::local(Region::contiguous(t.data, 1, t.bytes), Dtype::kU8)};
    phase.push_back(std::move(task));
  }
  if (log_level() >= LogLevel::kInfo) {
    size_t bytes = 0;
    for (const Transfer& t : sends) bytes += t.bytes;
    const int size_class = jaccl::size_class(bytes);
    if (first_time(text(call.comm->id(), "/p2p/", size_class, '/', m.rank))) {
      log(LogLevel::kInfo, "point_to_point ", bytes, " B (<= 2^", size_class, ") sent by rank ",
          m.rank, "/", m.size, " of communicator ", hex(call.comm->id()), call.comm->space_label(),
          " in ", sends.size(), " sends, ", receives.size(), " receives");
    }
  }
  std::vector<Phase> phases{std::move(phase)};
  run_phases(call, phases);
}

}  // namespace jaccl
