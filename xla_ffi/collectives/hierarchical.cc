#include "collectives/hierarchical.h"

#include <utility>

#include "collectives/streams.h"
#include "common/error.h"

namespace jaccl {
namespace {

// The group as hosts x local ranks.
struct Topology {
  explicit Topology(const Communicator::Member& m) : ranks(m.num_hosts) {
    for (int r = 0; r < m.size; ++r) ranks[m.hosts[r]].push_back(r);
    hosts = m.num_hosts;
    locals = static_cast<int>(ranks[0].size());
    host = m.hosts[m.rank];
    for (int l = 0; l < locals; ++l) {
      if (ranks[host][l] == m.rank) local = l;
    }
  }
  bool uniform() const {
    for (const auto& h : ranks) {
      if (static_cast<int>(h.size()) != locals) return false;
    }
    return true;
  }
  std::vector<std::vector<int>> ranks;  // ranks[h][l]
  int hosts = 1, locals = 1, host = 0, local = 0;
};

// [begin, begin + count) of part q of n parts of [0, total).
std::pair<size_t, size_t> part(size_t total, int n, int q) {
  size_t begin = part_start(total, n, q);
  return {begin, part_start(total, n, q + 1) - begin};
}

Region scratch_region(Communicator::Member& m, Dtype acc, size_t count) {
  const size_t bytes = count * dtype_size(acc);
  if (m.scratch.size() < bytes) m.scratch.resize(bytes);
  return Region::contiguous(m.scratch.data(), dtype_size(acc), count);
}

void require(const Topology& t) {
  if (t.hosts < 2 || t.locals < 2 || !t.uniform()) {
    throw_error(ErrorKind::kInvalidArgument,
                "the hierarchical algorithm needs a group on several hosts with the same number "
                "(> 1) of ranks on each");
  }
}

}  // namespace

void hierarchical_all_reduce(Call& call, const Buffers& b) {
  Communicator::Member& m = *call.member;
  const Topology t(m);
  require(t);
  const Dtype elem = call.dtype, acc = accumulator_dtype(elem);
  const size_t esize = dtype_size(elem);
  const int me = m.rank, h = t.host, l = t.local;
  auto block = [&](const void* base, int j) {
    auto [begin, count] = part(b.in_count, t.locals, j);
    return Region::contiguous(base, esize, count, begin);
  };
  const auto [block_begin, block_count] = part(b.in_count, t.locals, l);
  auto sub = [&](int k) { return part(block_count, t.hosts, k); };
  Region scratch = scratch_region(m, acc, block_count);
  std::vector<Phase> phases(4);

  // 1. Within the host: block l of every local input, reduced into scratch.
  Task reduce;
  reduce.count = block_count;
  for (int j = 0; j < t.locals; ++j) {
    const int q = t.ranks[h][j];
    if (q == me) {
      reduce.srcs.push_back(Endpoint::local(block(b.in, l), elem));
      continue;
    }
    phases[0].push_back(send_task(call, block(b.in, j), elem, q, stream_tag(1, 0, j)));
    reduce.srcs.push_back(receive_from(call, q, stream_tag(1, 0, l), elem));
  }
  reduce.sinks = {Endpoint::local(scratch, acc)};
  phases[0].push_back(std::move(reduce));

  // 2. Across hosts: sub-block h of block l over the scratch buffers of ranks (., l).
  const auto [mine_begin, mine_count] = sub(h);
  Region mine = Region::contiguous(b.out, esize, mine_count, block_begin + mine_begin);
  Task total;
  total.count = mine_count;
  for (int k = 0; k < t.hosts; ++k) {
    const int q = t.ranks[k][l];
    const auto [begin, count] = sub(k);
    if (q == me) {
      total.srcs.push_back(Endpoint::local(scratch.slice(begin, count), acc));
      continue;
    }
    phases[1].push_back(send_task(call, scratch.slice(begin, count), acc, q, stream_tag(2, 0, k)));
    total.srcs.push_back(receive_from(call, q, stream_tag(2, 0, h), acc));
  }
  total.sinks = {Endpoint::local(mine, elem)};
  phases[1].push_back(std::move(total));

  // 3. Across hosts: the sub-blocks of block l.  4. Within the host: the blocks.
  for (int k = 0; k < t.hosts; ++k) {
    const int q = t.ranks[k][l];
    if (q == me) continue;
    const auto [begin, count] = sub(k);
    phases[2].push_back(send_task(call, mine, elem, q, stream_tag(3, 0, h)));
    phases[2].push_back(store_task(call, q, stream_tag(3, 0, k),
                                   Region::contiguous(b.out, esize, count, block_begin + begin),
                                   elem));
  }
  for (int j = 0; j < t.locals; ++j) {
    const int q = t.ranks[h][j];
    if (q == me) continue;
    phases[3].push_back(send_task(call, block(b.out, l), elem, q, stream_tag(4, 0, l)));
    phases[3].push_back(store_task(call, q, stream_tag(4, 0, j), block(b.out, j), elem));
  }
  run_phases(call, phases);
}

void hierarchical_reduce_scatter(Call& call, const Buffers& b) {
  Communicator::Member& m = *call.member;
  const Topology t(m);
  require(t);
  const Dtype elem = call.dtype, acc = accumulator_dtype(elem);
  const size_t esize = dtype_size(elem), count = b.out_count;
  const int me = m.rank, h = t.host, l = t.local, n = m.size;
  auto block = [&](int r) { return Region::block(b.in, esize, b.in_count, b.outer_in, n, r); };
  Region scratch = scratch_region(m, acc, count * t.hosts);
  auto partial = [&](int k) { return scratch.slice(k * count, count); };
  std::vector<Phase> phases(2);

  // 1. Within the host: for every host k, block r(k, l) of every local input, into scratch.
  for (int j = 0; j < t.locals; ++j) {
    const int q = t.ranks[h][j];
    if (q == me) continue;
    for (int k = 0; k < t.hosts; ++k) {
      phases[0].push_back(send_task(call, block(t.ranks[k][j]), elem, q, stream_tag(1, 0, k)));
    }
  }
  for (int k = 0; k < t.hosts; ++k) {
    Task reduce;
    reduce.count = count;
    for (int j = 0; j < t.locals; ++j) {
      const int q = t.ranks[h][j];
      reduce.srcs.push_back(q == me ? Endpoint::local(block(t.ranks[k][l]), elem)
                                    : receive_from(call, q, stream_tag(1, 0, k), elem));
    }
    reduce.sinks = {Endpoint::local(partial(k), acc)};
    phases[0].push_back(std::move(reduce));
  }

  // 2. Across hosts: block r(h, l) over the partials of ranks (., l).
  Task total;
  total.count = count;
  for (int k = 0; k < t.hosts; ++k) {
    const int q = t.ranks[k][l];
    if (q == me) {
      total.srcs.push_back(Endpoint::local(partial(h), acc));
      continue;
    }
    phases[1].push_back(send_task(call, partial(k), acc, q, stream_tag(2, 0, k)));
    total.srcs.push_back(receive_from(call, q, stream_tag(2, 0, h), acc));
  }
  total.sinks = {Endpoint::local(Region::contiguous(b.out, esize, count), elem)};
  phases[1].push_back(std::move(total));
  run_phases(call, phases);
}

}  // namespace jaccl
