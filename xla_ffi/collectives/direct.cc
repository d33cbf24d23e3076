#include "collectives/direct.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/streams.h"
#include "collectives/waiter.h"
#include "common/call_sites.h"
#include "common/error.h"

namespace jaccl {
namespace {

constexpr size_t kSliceElems = 1 << 16;  // reduce in cache-sized slices

class DirectCall {
 public:
  DirectCall(Call& call, const Buffers& b)
      : call_(call), b_(b), group_(*call.member->direct), me_(call.member->rank),
        n_(call.member->size), deadline_(call.timeout_s), waiter_(call, deadline_) {}

  void run() {
    publish();
    barrier();
    validate();
    const size_t esize = dtype_size(call_.dtype);
    switch (call_.kind) {
      case CollectiveKind::kAllReduce: {
        auto block = [&](const void* base, int q) {
          size_t begin = part_start(b_.in_count, n_, q);
          return Region::contiguous(base, esize, part_start(b_.in_count, n_, q + 1) - begin, begin);
        };
        std::vector<Region> srcs;
        for (int q = 0; q < n_; ++q) srcs.push_back(block(entry(q).in, me_));
        reduce(block(b_.out, me_), srcs);
        barrier();
        for (int q = 0; q < n_; ++q) {
          if (q != me_) copy(block(b_.out, q), block(entry(q).out, q));
        }
        break;
      }
      case CollectiveKind::kReduceScatter: {
        std::vector<Region> srcs;
        for (int q = 0; q < n_; ++q) {
          srcs.push_back(Region::block(entry(q).in, esize, b_.in_count, b_.outer_in, n_, me_));
        }
        reduce(Region::contiguous(b_.out, esize, b_.out_count), srcs);
        break;
      }
      case CollectiveKind::kAllGather:
        for (int q = 0; q < n_; ++q) {
          copy(Region::block(b_.out, esize, b_.out_count, b_.outer_out, n_, q),
               Region::contiguous(entry(q).in, esize, b_.in_count));
        }
        break;
      case CollectiveKind::kAllToAll:
        for (int q = 0; q < n_; ++q) {
          copy(Region::block(b_.out, esize, b_.out_count, b_.outer_out, n_, q),
               Region::block(entry(q).in, esize, b_.in_count, b_.outer_in, n_, me_));
        }
        break;
      case CollectiveKind::kPermute: {
        const int source = b_.permutation.receive_from;
        Region out = Region::contiguous(b_.out, esize, b_.out_count);
        if (source < 0) {
          std::memset(b_.out, 0, b_.out_count * esize);
        } else {
          copy(out, Region::contiguous(entry(source).in, esize, b_.out_count));
        }
        break;
      }
      case CollectiveKind::kRaggedAllToAll:
        ragged();
        break;
      default:
        throw_error(ErrorKind::kInvalidArgument, "no direct schedule for ", kind_name(call_.kind));
    }
    barrier();
  }

 private:
  const DirectGroup::Entry& entry(int rank) const { return group_.entries[rank]; }

  // What member q sends this member, checked as the engine's placement phase checks it
  // (ragged_all_to_all.cc), then copied where q placed it. Every member copies what it reads
  // of the others' arguments before any member checks (a member that fails leaves at once,
  // and its arguments with it), and no rows move until every member passed its checks (the
  // others notice a failure at the barrier, through the abort board).
  void ragged() {
    const int k = b_.ragged_rows.slices_per_rank;
    const size_t esize = dtype_size(call_.dtype), h = b_.row_elems;
    std::vector<RaggedPlacement> placed(static_cast<size_t>(n_) * k);
    for (int q = 0; q < n_; ++q) {
      const RaggedRows& theirs = entry(q).buffers->ragged_rows;
      for (int j = 0; j < k; ++j) {
        const int at = me_ * k + j;  // q's entry for this member's slice j
        placed[q * k + j] = RaggedPlacement{theirs.output_offsets[at], theirs.send_sizes[at]};
      }
    }
    barrier();
    check_ragged_placements(call_, b_, placed);
    barrier();
    if (b_.zero_unwritten) zero_unwritten_rows(b_, call_.dtype, placed);
    if (h == 0) return;
    for (int q = 0; q < n_; ++q) {
      const Buffers& from = *entry(q).buffers;
      for (int j = 0; j < k; ++j) {
        const RaggedPlacement& p = placed[q * k + j];
        if (p.rows == 0) continue;
        const size_t first = static_cast<size_t>(from.ragged_rows.input_offsets[me_ * k + j]) * h;
        copy(Region::contiguous(b_.out, esize, p.rows * h, p.offset * h),
             Region::contiguous(from.in, esize, p.rows * h, first));
      }
    }
  }

  void publish() {
    DirectGroup::Entry& e = group_.entries[me_];
    e.in = b_.in;
    e.out = b_.out;
    e.in_count = b_.in_count;
    e.out_count = b_.out_count;
    e.outer_in = b_.outer_in;
    e.outer_out = b_.outer_out;
    e.buffers = &b_;
    e.kind = static_cast<uint8_t>(call_.kind);
    e.dtype = static_cast<uint8_t>(call_.dtype);
    e.redop = static_cast<uint8_t>(call_.op);
    e.site = call_.site;
    e.calls.store(call_.seq + 1, std::memory_order_release);
  }

  // Monotonic barrier: the k-th barrier of every member waits for k * n arrivals.
  void barrier() {
    const uint64_t target = ++call_.member->direct_barriers * static_cast<uint64_t>(n_);
    if (group_.arrivals.fetch_add(1, std::memory_order_acq_rel) + 1 == target) {
      for (int q = 0; q < n_; ++q) {
        if (q != me_) ring(group_.doorbells[q]);
      }
      return;
    }
    for (;;) {
      uint32_t seen = waiter_.doorbell_seq();
      if (group_.arrivals.load(std::memory_order_acquire) >= target) break;
      std::vector<int> late;
      for (int q = 0; q < n_; ++q) {
        if (q != me_ && entry(q).calls.load(std::memory_order_acquire) < call_.seq + 1) {
          late.push_back(q);
        }
      }
      waiter_.idle(seen, late);
    }
    waiter_.progressed();
  }

  void validate() const {
    const DirectGroup::Entry& mine = entry(me_);
    for (int q = 0; q < n_; ++q) {
      const DirectGroup::Entry& e = entry(q);
      if (e.calls.load(std::memory_order_acquire) == call_.seq + 1 && e.kind == mine.kind &&
          e.dtype == mine.dtype && e.redop == mine.redop && e.site == mine.site &&
          e.in_count == mine.in_count && e.out_count == mine.out_count) {
        continue;
      }
      auto show = [](const DirectGroup::Entry& x) {
        const auto kind = static_cast<CollectiveKind>(x.kind);
        return std::string(kind_name(kind)) + " #" + std::to_string(x.calls.load() - 1) +
               " of " + dtype_name(static_cast<Dtype>(x.dtype)) + "[" +
               std::to_string(x.in_count) + "] (" + op_shown(kind, x.redop) + "direct)" +
               at_site(x.site);
      };
      throw_error(ErrorKind::kMismatch, "ranks disagree: ", describe_rank(call_, me_), " is in ",
                  show(mine), " but ", describe_rank(call_, q), " is in ", show(e),
                  disagreement_advice(mine.site, e.site));
    }
  }

  // dst = op(srcs[0], srcs[1], ...) over regions of equal length, slice by slice.
  void reduce(const Region& dst, const std::vector<Region>& srcs) {
    std::vector<Operand> operands(srcs.size());
    for (size_t p = 0; p < dst.count;) {
      size_t run = std::min(kSliceElems, dst.count - p), r;
      void* d = dst.at(p, &r);
      run = std::min(run, r);
      for (size_t k = 0; k < srcs.size(); ++k) {
        operands[k] = Operand{srcs[k].at(p, &r), call_.dtype};
        run = std::min(run, r);
      }
      combine(call_.op, call_.dtype, d, call_.dtype, operands.data(),
              static_cast<int>(operands.size()), run);
      p += run;
    }
  }

  void copy(const Region& dst, const Region& src) {
    for (size_t p = 0; p < dst.count;) {
      size_t r1, r2;
      void* d = dst.at(p, &r1);
      const void* s = src.at(p, &r2);
      size_t run = std::min(r1, r2);
      convert(call_.dtype, d, call_.dtype, s, call_.dtype, run);
      p += run;
    }
  }

  Call& call_;
  const Buffers& b_;
  DirectGroup& group_;
  const int me_, n_;
  Deadline deadline_;
  Waiter waiter_;
};

}  // namespace

void direct_collective(Call& call, const Buffers& buffers) {
  JACCL_CHECK(call.member->direct != nullptr, "direct collective on a group that spans processes");
  if (call.kind == CollectiveKind::kRaggedAllToAll) check_ragged_rows(call, buffers);
  if (call.kind == CollectiveKind::kPermute && buffers.out == buffers.in) {
    // In place: the peers read a copy of this member's input, since its buffer takes the
    // source's meanwhile.
    const size_t bytes = buffers.in_count * dtype_size(call.dtype);
    std::vector<char>& copy = call.member->scratch;
    if (copy.size() < bytes) copy.resize(bytes);
    std::memcpy(copy.data(), buffers.in, bytes);
    Buffers published = buffers;
    published.in = copy.data();
    DirectCall(call, published).run();
    return;
  }
  DirectCall(call, buffers).run();
}

}  // namespace jaccl
