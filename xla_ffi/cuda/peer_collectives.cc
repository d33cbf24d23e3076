// Schedules of the peer path. Every collective walks its data in chunks that fit the
// workspace staging area; each chunk is
//
//   1. copy in   : this rank's part of the input goes into its own staging area, packed in
//                  destination order (block q of a split input first at q * m);
//   2. start     : barrier that also checks every rank runs the same call;
//   3. work      : each rank reads the peers' staging areas directly (reduction kernels take
//                  up to kMaxPeers operand pointers, copies are peer copies);
//   4. end       : barrier, after which nobody reads this rank's staging area any more, so
//                  the next chunk (or call, of any group) may overwrite it.
//
// ppermute: every rank stages its input; a rank with a source copies that peer's staging
// area into its output (zeros without one). All ranks of the group meet at the barriers, so
// the ranks outside the permutation's pairs keep the schedule too.
//
// all_reduce is one-shot for small messages (every rank reduces the whole chunk from all n
// staging areas: one barrier pair, n-fold reads) and two-shot for large ones (rank q reduces
// slice q in place in its own staging area, a middle barrier, then everyone copies slice q
// from rank q: each byte read about twice, as in reduce-scatter + all-gather). Operands are
// always combined in rank order, as on the CPU path.
#include "cuda/peer_collectives.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "cuda/kernels/kernels.h"
#include "cuda/kernels/peer_kernels.h"
#include "cuda/peer_group.h"

namespace jaccl::cuda {
namespace {

std::atomic<size_t> one_shot_limit{256 * 1024};  // JACCL_CUDA_ONESHOT_KB

// Block q of a tensor of `count` elements split n ways after `outer` leading rows, from
// element `first` of the block on (the layout of Region::block).
StridedView block_view(const void* base, size_t esize, size_t count, size_t outer, int n, int q,
                       size_t first) {
  const size_t strip = count / (outer * n);
  char* b = const_cast<char*>(static_cast<const char*>(base)) + q * strip * esize;
  if (outer == 1) return StridedView{b, 0, 0, first};
  return StridedView{b, strip, strip * n, first};
}

StridedView contiguous(const void* base, size_t first = 0) {
  return StridedView{const_cast<char*>(static_cast<const char*>(base)), 0, 0, first};
}

class PeerSchedule {
 public:
  PeerSchedule(LocalDevice& me, const std::vector<int64_t>& members, int rank,
               const CollectiveRequest& call, int receive_from, cudaStream_t stream)
      : group_(me, members, rank), rank_(rank), n_(static_cast<int>(members.size())), call_(call),
        receive_from_(receive_from), stream_(stream), esize_(dtype_size(call.address.dtype)) {
    // Chunks keep every packed block 16-byte aligned in the staging area.
    vec_ = std::max<size_t>(1, 16 / esize_);
    capacity_ = me.workspace.data_bytes / esize_ / vec_ * vec_;
    one_shot_ = call.address.kind == CollectiveKind::kAllReduce &&
                peer_all_reduce_algorithm(call.algorithm, call.in_count * esize_) == Algorithm::kNaive;
  }

  cudaError_t run() {
    if (capacity_ < vec_ * n_) return cudaErrorInvalidValue;  // below the 1 MiB minimum
    switch (call_.address.kind) {
      case CollectiveKind::kAllReduce: return all_reduce();
      case CollectiveKind::kReduceScatter: return split_input(/*reduce=*/true);
      case CollectiveKind::kAllToAll: return split_input(/*reduce=*/false);
      case CollectiveKind::kAllGather: return all_gather();
      case CollectiveKind::kPermute: return permute();
      default: return cudaErrorInvalidValue;
    }
  }

 private:
  char* staging(int q) const { return group_.staging(q); }
  char* at(const void* base, size_t elements) const {
    return const_cast<char*>(static_cast<const char*>(base)) + elements * esize_;
  }

  cudaError_t all_reduce() {
    const size_t chunk = capacity_ / (vec_ * n_) * (vec_ * n_);
    chunk_ = chunk;
    for (size_t a = 0; a < call_.in_count; a += chunk) {
      const size_t m = std::min(chunk, call_.in_count - a);
      cudaError_t err = cudaMemcpyAsync(staging(rank_), at(call_.in, a), m * esize_,
                                        cudaMemcpyDeviceToDevice, stream_);
      if (err == cudaSuccess) err = barrier(true, a);
      if (err != cudaSuccess) return err;
      if (one_shot_) {
        err = reduce(at(call_.out, a), 0, m);
      } else {
        const size_t slice = (m + n_ - 1) / n_;
        const size_t width = (slice + vec_ - 1) / vec_ * vec_;
        auto begin = [&](int q) { return std::min(m, q * width); };
        const size_t mine = begin(rank_), mine_end = begin(rank_ + 1);
        err = reduce(at(staging(rank_), mine), mine, mine_end - mine);
        if (err == cudaSuccess) err = barrier(false, a);
        for (int q = 0; q < n_ && err == cudaSuccess; ++q) {
          const size_t b = begin(q), e = begin(q + 1);
          if (e > b) {
            err = cudaMemcpyAsync(at(call_.out, a + b), at(staging(q), b), (e - b) * esize_,
                                  cudaMemcpyDefault, stream_);
          }
        }
      }
      if (err == cudaSuccess) err = barrier(false, a);
      if (err != cudaSuccess) return err;
    }
    return cudaSuccess;
  }

  // reduce_scatter (reduce = true) and all_to_all: the input is split into n blocks; rank q
  // gets block q of everyone, reduced into its output or placed as block p of its output.
  cudaError_t split_input(bool reduce_blocks) {
    const size_t block = call_.in_count / n_;
    const size_t chunk = capacity_ / n_ / vec_ * vec_;
    chunk_ = chunk;
    for (size_t a = 0; a < block; a += chunk) {
      const size_t m = std::min(chunk, block - a);
      cudaError_t err = cudaSuccess;
      for (int q = 0; q < n_ && err == cudaSuccess; ++q) {
        err = launch_strided_copy(contiguous(staging(rank_), q * m),
                                  block_view(call_.in, esize_, call_.in_count, call_.outer_in, n_, q, a),
                                  m, esize_, stream_);
      }
      if (err == cudaSuccess) err = barrier(true, a);
      if (err != cudaSuccess) return err;
      if (reduce_blocks) {
        err = reduce(at(call_.out, a), rank_ * m, m);
      } else {
        for (int q = 0; q < n_ && err == cudaSuccess; ++q) {
          err = launch_strided_copy(
              block_view(call_.out, esize_, call_.out_count, call_.outer_out, n_, q, a),
              contiguous(staging(q), rank_ * m), m, esize_, stream_);
        }
      }
      if (err == cudaSuccess) err = barrier(false, a);
      if (err != cudaSuccess) return err;
    }
    return cudaSuccess;
  }

  cudaError_t all_gather() {
    chunk_ = capacity_;
    for (size_t a = 0; a < call_.in_count; a += capacity_) {
      const size_t m = std::min(capacity_, call_.in_count - a);
      cudaError_t err = cudaMemcpyAsync(staging(rank_), at(call_.in, a), m * esize_,
                                        cudaMemcpyDeviceToDevice, stream_);
      if (err == cudaSuccess) err = barrier(true, a);
      for (int q = 0; q < n_ && err == cudaSuccess; ++q) {
        err = launch_strided_copy(
            block_view(call_.out, esize_, call_.out_count, call_.outer_out, n_, q, a),
            contiguous(staging(q)), m, esize_, stream_);
      }
      if (err == cudaSuccess) err = barrier(false, a);
      if (err != cudaSuccess) return err;
    }
    return cudaSuccess;
  }

  cudaError_t permute() {
    chunk_ = capacity_;
    for (size_t a = 0; a < call_.in_count; a += capacity_) {
      const size_t m = std::min(capacity_, call_.in_count - a);
      cudaError_t err = cudaMemcpyAsync(staging(rank_), at(call_.in, a), m * esize_,
                                        cudaMemcpyDeviceToDevice, stream_);
      if (err == cudaSuccess) err = barrier(true, a);
      if (err == cudaSuccess) {
        err = receive_from_ < 0
                  ? cudaMemsetAsync(at(call_.out, a), 0, m * esize_, stream_)
                  : cudaMemcpyAsync(at(call_.out, a), staging(receive_from_), m * esize_,
                                    cudaMemcpyDefault, stream_);
      }
      if (err == cudaSuccess) err = barrier(false, a);
      if (err != cudaSuccess) return err;
    }
    return cudaSuccess;
  }

  // dst[0, m) = op over ranks of staging(q)[offset, offset + m), in rank order.
  cudaError_t reduce(void* dst, size_t offset, size_t m) {
    const void* srcs[kMaxPeers];
    for (int q = 0; q < n_; ++q) srcs[q] = at(staging(q), offset);
    return launch_reduce(call_.op, call_.address.dtype, dst, srcs, n_, m, stream_);
  }

  cudaError_t barrier(bool start, size_t chunk_first) {
    // Everything the ranks must agree on, the schedule included (JACCL_CUDA_ONESHOT_KB and
    // the staging size decide it): a rank running another schedule fails the first barrier.
    const CallAddress& at = call_.address;
    const uint64_t call[kDescriptorWords] = {
        static_cast<uint64_t>(at.kind) | static_cast<uint64_t>(at.dtype) << 8 |
            static_cast<uint64_t>(call_.op) << 16 | static_cast<uint64_t>(one_shot_) << 24 |
            static_cast<uint64_t>(at.site) << 32,
        call_.in_count, call_.out_count, call_.outer_in, call_.outer_out, chunk_first,
        group_.hash(), chunk_};
    return group_.barrier(start, call, stream_);
  }

  PeerGroup group_;
  const int rank_, n_;
  const CollectiveRequest& call_;
  const int receive_from_;
  cudaStream_t stream_;
  const size_t esize_;
  size_t vec_ = 1, capacity_ = 0, chunk_ = 0;
  bool one_shot_ = false;
};

}  // namespace

void set_one_shot_limit_bytes(size_t bytes) {
  one_shot_limit.store(bytes, std::memory_order_relaxed);
}

Algorithm peer_all_reduce_algorithm(Algorithm requested, size_t bytes) {
  if (requested == Algorithm::kNaive) return Algorithm::kNaive;
  if (requested != Algorithm::kAuto) return Algorithm::kMesh;
  const size_t one_shot = one_shot_limit.load(std::memory_order_relaxed);
  return bytes <= one_shot ? Algorithm::kNaive : Algorithm::kMesh;
}

cudaError_t run_peer_collective(LocalDevice& me, const std::vector<int64_t>& members, int rank,
                                const CollectiveRequest& call, int receive_from,
                                cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(me.mutex);
  cudaGetLastError();  // an unrelated earlier error must not look like ours
  cudaError_t err = PeerSchedule(me, members, rank, call, receive_from, stream).run();
  if (err != cudaSuccess) {
    mark_broken(me, members, std::string("enqueueing a peer collective: ") + cudaGetErrorString(err));
  }
  return err;
}

}  // namespace jaccl::cuda
