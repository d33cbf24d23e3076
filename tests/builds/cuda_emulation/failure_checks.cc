// Failures on the peer path, on emulated GPUs: every member of the group ends with an error in
// its status (never a hang), the one that saw the cause names it, the others learn it from
// the abort words; ranks that disagree on the call, a member that never comes (deadline), a
// member whose process died, a bad expert id in an MoE dispatch, and a device that failed
// before refusing its next call at once.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "emulated_world.h"
#include "cuda/peer_moe.h"
#include "cuda/peer_collectives.h"

namespace jaccl::emulated {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<int64_t> everyone(int n) {
  std::vector<int64_t> m;
  for (int g = 0; g < n; ++g) m.push_back(g);
  return m;
}

cudaError_t all_reduce(cuda::EmulatedWorld& world, int rank, int n, size_t count) {
  std::vector<float> data(count, 1.0f);
  CollectiveRequest call;
  call.in = call.out = data.data();
  call.in_count = call.out_count = count;
  return cuda::run_peer_collective(world.device(rank), everyone(n), rank, call, -1, nullptr);
}

int32_t error_of(cuda::EmulatedWorld& world, int g) { return world.device(g).status_host->error; }

void check_mismatch() {
  const int n = 3;
  cuda::EmulatedWorld world(n, 1 << 20, /*timeout_s=*/60);
  const auto start = Clock::now();
  std::atomic<int> refused{0};
  run_ranks(n, [&](int rank) {
    CHECK(all_reduce(world, rank, n, 1000) == cudaSuccess, "mismatch: the first call failed");
    CHECK(all_reduce(world, rank, n, rank == 1 ? 1001 : 1000) != cudaSuccess,
          "mismatch: rank " + std::to_string(rank) + " did not fail");
    // A fresh context on a device that failed: its next call fails at the start barrier.
    jaccl_emu::reset_context();
    world.device(rank).status_host->error = cuda::kPeerOk;
    if (all_reduce(world, rank, n, 1000) != cudaSuccess &&
        error_of(world, rank) == cuda::kPeerAborted) {
      ++refused;
    }
  });
  CHECK(seconds_since(start) < 10, "mismatch: took " + std::to_string(seconds_since(start)) + " s");
  CHECK(refused == n, "mismatch: " + std::to_string(refused.load()) + " of 3 devices refused the next call");
}

void check_mismatch_reports() {
  const int n = 3;
  cuda::EmulatedWorld world(n, 1 << 20, 60);
  run_ranks(n, [&](int rank) { all_reduce(world, rank, n, rank == 2 ? 64 : 65); });
  int mismatches = 0;
  for (int g = 0; g < n; ++g) {
    const int32_t e = error_of(world, g);
    CHECK(e == cuda::kPeerMismatch || e == cuda::kPeerAborted,
          "mismatch: device " + std::to_string(g) + " has error " + std::to_string(e));
    if (e == cuda::kPeerMismatch) {
      ++mismatches;
      const auto& s = *world.device(g).status_host;
      CHECK(s.mine[1] != s.theirs[1], "mismatch: the report does not show the two counts");
      CHECK((g == 2) == (s.rank != 2), "mismatch: device " + std::to_string(g) + " names rank " + std::to_string(s.rank));
    }
  }
  CHECK(mismatches > 0, "mismatch: nobody reported the disagreement");
}

void check_deadline() {
  const int n = 3;
  cuda::EmulatedWorld world(n, 1 << 20, /*timeout_s=*/0.3);
  const auto start = Clock::now();
  run_ranks(n, [&](int rank) {
    if (rank == 2) {  // arrives only after the others gave up: refused at once
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      const auto late = Clock::now();
      CHECK(all_reduce(world, rank, n, 100) != cudaSuccess, "deadline: the late rank did not fail");
      CHECK(seconds_since(late) < 0.2, "deadline: the late rank waited");
      CHECK(error_of(world, rank) == cuda::kPeerAborted, "deadline: the late rank was not told");
      return;
    }
    CHECK(all_reduce(world, rank, n, 100) != cudaSuccess, "deadline: rank " + std::to_string(rank) + " did not fail");
  });
  int timeouts = 0;
  for (int g = 0; g < 2; ++g) {
    const auto& s = *world.device(g).status_host;
    timeouts += s.error == cuda::kPeerTimeout;
    if (s.error == cuda::kPeerTimeout) CHECK(s.device == 2, "deadline: the timeout names device " + std::to_string(s.device));
  }
  CHECK(timeouts > 0, "deadline: no device reported the timeout");
  CHECK(seconds_since(start) < 5, "deadline: took " + std::to_string(seconds_since(start)) + " s");
}

void check_dead_process() {
  const int n = 3;
  cuda::EmulatedWorld world(n, 1 << 20, /*timeout_s=*/60, {0, 1, 2});
  const auto start = Clock::now();
  run_ranks(n, [&](int rank) {
    if (rank == 2) {  // never calls; its process dies
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      world.kill(2);
      return;
    }
    CHECK(all_reduce(world, rank, n, 100) != cudaSuccess, "dead peer: rank " + std::to_string(rank) + " did not fail");
  });
  for (int g = 0; g < 2; ++g) {
    const auto& s = *world.device(g).status_host;
    CHECK(s.error == cuda::kPeerDead || s.error == cuda::kPeerAborted,
          "dead peer: device " + std::to_string(g) + " has error " + std::to_string(s.error));
    if (s.error == cuda::kPeerDead) CHECK(s.device == 2, "dead peer: names device " + std::to_string(s.device));
  }
  CHECK(error_of(world, 0) == cuda::kPeerDead || error_of(world, 1) == cuda::kPeerDead, "dead peer: nobody named it");
  CHECK(seconds_since(start) < 5, "dead peer: took " + std::to_string(seconds_since(start)) + " s");
}

void check_bad_expert() {
  const int n = 2;
  cuda::EmulatedWorld world(n, 64 * 1024, 60);
  run_ranks(n, [&](int rank) {
    std::vector<float> x(4 * 8, 1.0f), out(4 * 8);
    std::vector<int32_t> experts = {0, 1, 2, 3, 4, 5, 6, 7};
    if (rank == 1) experts[5] = 8;  // num_experts is 8
    const std::vector<int32_t> offsets = {0, 1, 2}, rows = {0, 1}, recv = {0, 1};
    MoeRequest call;
    call.address.kind = CollectiveKind::kMoeDispatch;
    call.rows = x.data();
    call.rows_count = 4;
    call.row_elems = 8;
    call.lists[kSendRows] = rows.data();
    call.lists[kSendOffsets] = offsets.data();
    call.lists[kRecvRows] = recv.data();
    call.lists[kRecvOffsets] = offsets.data();
    call.list_counts[kSendRows] = call.list_counts[kRecvRows] = 2;
    call.topk_idx = experts.data();
    call.topk_count = experts.size();
    call.num_experts = 8;
    call.out = out.data();
    call.out_rows = 4;
    call.out_count = out.size();
    CHECK(cuda::run_peer_moe(world.device(rank), everyone(n), rank, call, nullptr) != cudaSuccess,
          "bad expert: rank " + std::to_string(rank) + " did not fail");
  });
  const auto& s = *world.device(1).status_host;
  CHECK(s.error == cuda::kPeerBadExpert && s.rank == 5 && s.device == 8,
        "bad expert: device 1 reports error " + std::to_string(s.error) + " at " + std::to_string(s.rank) +
            " value " + std::to_string(s.device));
  CHECK(error_of(world, 0) == cuda::kPeerAborted, "bad expert: device 0 was not told");
}

}  // namespace

void check_failures() {
  check_mismatch();
  check_mismatch_reports();
  check_deadline();
  check_dead_process();
  check_bad_expert();
}

}  // namespace jaccl::emulated
