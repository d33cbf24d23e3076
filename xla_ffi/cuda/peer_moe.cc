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

bool combines(const MoeRequest& c) { return c.address.kind == CollectiveKind::kMoeCombine; }

size_t row_bytes(const MoeRequest& c) { return c.row_elems * dtype_size(c.address.dtype); }

size_t table_bytes(const MoeRequest& c) {
  return combines(c) ? round_up(c.out_rows * static_cast<size_t>(c.topk) * sizeof(void*), 256) : 0;
}

class MoeSchedule {
 public:
  MoeSchedule(LocalDevice& me, const std::vector<int64_t>& members, int rank,
              const MoeRequest& call, cudaStream_t stream)
      : group_(me, members, rank), call_(call), stream_(stream), combine_(combines(call)),
        pair_dot_(combine_ && call.pair_dot), dtype_(call.address.dtype),
        row_bytes_(row_bytes(call)), send_capacity_(call.list_counts[kSendRows]),
        recv_capacity_(call.list_counts[kRecvRows]), topk_(static_cast<size_t>(call.topk)) {}

  cudaError_t run() {
    LocalDevice& me = group_.me();
    const int n = group_.size();
    char* mine = group_.staging(group_.rank());
    const int32_t* const* lists = call_.lists;
    cudaError_t err = cudaSuccess;
    if (!combine_) {
      err = launch_check_experts(call_.topk_idx, call_.topk_count, call_.num_experts,
                                 me.status_device, me.workspace.abort, me.device, stream_);
    }
    if (err == cudaSuccess) {
      err = cudaMemcpyAsync(mine, lists[kSendOffsets], (n + 1) * sizeof(int32_t),
                            cudaMemcpyDeviceToDevice, stream_);
    }
    if (err == cudaSuccess) {
      err = launch_pack_rows(mine + kMoeRowsOffset, static_cast<const char*>(call_.rows),
                             call_.rows_count, lists[kSendRows], lists[kSendOffsets], n,
                             send_capacity_, row_bytes_, stream_);
    }
    if (err == cudaSuccess && !combine_) {
      err = cudaMemsetAsync(call_.out, 0, out_bytes(call_), stream_);
    }
    if (err == cudaSuccess) err = barrier(true);
    if (err != cudaSuccess) return err;
    PeerRows peers;
    peers.n = n;
    peers.me = group_.rank();
    peers.sent_capacity = send_capacity_;
    for (int q = 0; q < n; ++q) peers.staging[q] = group_.staging(q);
    if (!combine_) {
      err = launch_scatter_from_peers(static_cast<char*>(call_.out), call_.out_rows,
                                      lists[kRecvRows], lists[kRecvOffsets], recv_capacity_, peers,
                                      row_bytes_, stream_);
    } else {
      const size_t tokens = call_.out_rows, pairs = tokens * topk_;
      auto** table = reinterpret_cast<const void**>(mine + me.workspace.data_bytes -
                                                    table_bytes(call_));
      err = cudaMemsetAsync(table, 0, pairs * sizeof(void*), stream_);
      if (err == cudaSuccess) {
        err = launch_pair_table(table, pairs, lists[kRecvRows], lists[kRecvOffsets],
                                recv_capacity_, peers, row_bytes_, stream_);
      }
      const size_t hidden = call_.row_elems;
      if (err == cudaSuccess && pair_dot_) {
        err = launch_pair_dot(dtype_, static_cast<float*>(call_.out), table, call_.extra, tokens,
                              topk_, hidden, stream_);
      } else if (err == cudaSuccess) {
        err = launch_moe_combine(dtype_, call_.out, table, static_cast<const float*>(call_.extra),
                                 tokens, topk_, hidden, stream_);
      }
    }
    if (err == cudaSuccess) err = barrier(false);
    return err;
  }

 private:
  cudaError_t barrier(bool start) {
    const uint64_t call[kDescriptorWords] = {
        static_cast<uint64_t>(call_.address.kind) | static_cast<uint64_t>(dtype_) << 8 |
            static_cast<uint64_t>(pair_dot_) << 24 |
            static_cast<uint64_t>(call_.address.site) << 32,
        call_.rows_count, row_bytes_, send_capacity_, recv_capacity_, call_.out_rows,
        group_.hash(), topk_};
    return group_.barrier(start, call, stream_);
  }

  PeerGroup group_;
  const MoeRequest& call_;
  cudaStream_t stream_;
  const bool combine_, pair_dot_;
  const Dtype dtype_;
  const size_t row_bytes_, send_capacity_, recv_capacity_, topk_;
};

}  // namespace

bool peer_moe_fits(const LocalDevice& me, const MoeRequest& call) {
  const size_t bytes = row_bytes(call);
  const size_t rows = kMoeRowsOffset + round_up(call.list_counts[kSendRows] * bytes, 256);
  return bytes > 0 && rows + table_bytes(call) <= me.workspace.data_bytes;
}

cudaError_t run_peer_moe(LocalDevice& me, const std::vector<int64_t>& members, int rank,
                         const MoeRequest& call, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(me.mutex);
  cudaGetLastError();  // an unrelated earlier error must not look like ours
  cudaError_t err = MoeSchedule(me, members, rank, call, stream).run();
  if (err != cudaSuccess) {
    mark_broken(me, members, std::string("enqueueing a peer MoE op: ") + cudaGetErrorString(err));
  }
  return err;
}

}  // namespace jaccl::cuda
