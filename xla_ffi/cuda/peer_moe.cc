// Schedule of the MoE ops on the peer path, one pass (the rows must fit the staging area):
//
//   1. (dispatch) check every expert id; a bad one raises this device's abort word, so the
//      start barrier below fails on every rank;
//   2. publish: this rank's send offsets at the head of its staging area, then its rows packed
//      in send-list order (grouped by destination);
//   3. start barrier (checks that every rank runs the same op on the same shapes);
//   4. dispatch: zero the output and place every received row, read straight from its
//      sender's staging area, where the receive list says;
//      combine: build the pair table (pair t*K+k -> address of its row in its sender's
//      staging area, null when the pair has no row), then the weighted sum in k order (or
//      the per-pair dot product of the gradient) from it;
//   5. end barrier: nobody reads this rank's staging area any more.
//
// The pair table lives at the end of this rank's own staging area (nobody else reads it).
#include "cuda/peer_moe.h"

#include <mutex>
#include <string>

#include "collectives/kinds.h"
#include "cuda/kernels/kernels.h"
#include "cuda/kernels/moe_peer_kernels.h"
#include "cuda/peer_group.h"

namespace jaccl::cuda {
namespace {

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

size_t table_bytes(const PeerMoeCall& c) {
  return c.combine ? round_up(c.tokens * c.topk * sizeof(void*), 256) : 0;
}

class MoeSchedule {
 public:
  MoeSchedule(LocalDevice& me, const std::vector<int64_t>& members, int rank,
              const PeerMoeCall& call, cudaStream_t stream)
      : group_(me, members, rank), call_(call), stream_(stream) {}

  cudaError_t run() {
    LocalDevice& me = group_.me();
    const int n = group_.size();
    char* mine = group_.staging(group_.rank());
    cudaError_t err = cudaSuccess;
    if (!call_.combine) {
      err = launch_check_experts(call_.topk_idx, call_.topk_count, call_.num_experts,
                                 me.status_device, me.workspace.abort, me.device, stream_);
    }
    if (err == cudaSuccess) {
      err = cudaMemcpyAsync(mine, call_.lists[1], (n + 1) * sizeof(int32_t),
                            cudaMemcpyDeviceToDevice, stream_);
    }
    if (err == cudaSuccess) {
      err = launch_pack_rows(mine + kMoeRowsOffset, call_.rows, call_.rows_count, call_.lists[0],
                             call_.lists[1], n, call_.send_capacity, call_.row_bytes, stream_);
    }
    if (err == cudaSuccess && !call_.combine) {
      err = cudaMemsetAsync(call_.out, 0, call_.out_bytes, stream_);
    }
    if (err == cudaSuccess) err = barrier(true);
    if (err != cudaSuccess) return err;
    PeerRows peers;
    peers.n = n;
    peers.me = group_.rank();
    peers.sent_capacity = call_.send_capacity;
    for (int q = 0; q < n; ++q) peers.staging[q] = group_.staging(q);
    if (!call_.combine) {
      err = launch_scatter_from_peers(static_cast<char*>(call_.out), call_.out_rows, call_.lists[2],
                                      call_.lists[3], call_.recv_capacity, peers, call_.row_bytes,
                                      stream_);
    } else {
      const size_t pairs = call_.tokens * call_.topk;
      auto** table = reinterpret_cast<const void**>(mine + me.workspace.data_bytes - table_bytes(call_));
      err = cudaMemsetAsync(table, 0, pairs * sizeof(void*), stream_);
      if (err == cudaSuccess) {
        err = launch_pair_table(table, pairs, call_.lists[2], call_.lists[3], call_.recv_capacity,
                                peers, call_.row_bytes, stream_);
      }
      const size_t hidden = call_.row_bytes / dtype_size(call_.dtype);
      if (err == cudaSuccess && call_.dout != nullptr) {
        err = launch_pair_dot(call_.dtype, static_cast<float*>(call_.out), table, call_.dout,
                              call_.tokens, call_.topk, hidden, stream_);
      } else if (err == cudaSuccess) {
        err = launch_moe_combine(call_.dtype, call_.out, table, call_.weights, call_.tokens,
                                 call_.topk, hidden, stream_);
      }
    }
    if (err == cudaSuccess) err = barrier(false);
    return err;
  }

 private:
  cudaError_t barrier(bool start) {
    const uint64_t call[kDescriptorWords] = {
        static_cast<uint64_t>(call_.combine ? CollectiveKind::kMoeCombine : CollectiveKind::kMoeDispatch) |
            static_cast<uint64_t>(call_.dtype) << 8 | static_cast<uint64_t>(call_.dout != nullptr) << 24 |
            static_cast<uint64_t>(call_.site) << 32,
        call_.rows_count, call_.row_bytes, call_.send_capacity, call_.recv_capacity,
        call_.out_rows, group_.hash(), call_.topk};
    return group_.barrier(start, call, stream_);
  }

  PeerGroup group_;
  const PeerMoeCall& call_;
  cudaStream_t stream_;
};

}  // namespace

bool peer_moe_fits(const LocalDevice& me, const PeerMoeCall& call) {
  const size_t rows = kMoeRowsOffset + round_up(call.send_capacity * call.row_bytes, 256);
  return call.row_bytes > 0 && rows + table_bytes(call) <= me.workspace.data_bytes;
}

cudaError_t run_peer_moe(LocalDevice& me, const std::vector<int64_t>& members, int rank,
                         const PeerMoeCall& call, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(me.mutex);
  cudaGetLastError();  // an unrelated earlier error must not look like ours
  cudaError_t err = MoeSchedule(me, members, rank, call, stream).run();
  if (err != cudaSuccess) {
    mark_broken(me, members, std::string("enqueueing a peer MoE op: ") + cudaGetErrorString(err));
  }
  return err;
}

}  // namespace jaccl::cuda
