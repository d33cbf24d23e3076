// GPUs of one host, emulated on host threads: the peer registry of handlers/cuda_peers.h
// (its handler side) over plain host memory, for the schedules of cuda/peer_collectives.cc and
// cuda/peer_moe.cc to run unchanged (tests only).
//
// Contract: build one EmulatedWorld before any schedule runs and keep it alive while they
// do; device g is LocalDevice g of process process_of[g]. Every workspace has the staging
// size given; flags, descriptor and abort words start at zero. kill(process) marks a process
// dead the way the host watcher would.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/peers.h"

namespace jaccl::cuda {

class EmulatedWorld {
 public:
  EmulatedWorld(int devices, size_t data_bytes, double timeout_s,
                std::vector<int> process_of = {});
  ~EmulatedWorld();

  int size() const { return static_cast<int>(locals_.size()); }
  LocalDevice& device(int g) { return *locals_[static_cast<size_t>(g)]; }
  void kill(int process);
  static EmulatedWorld* current();

  const Peer* peer(int64_t device) const;
  uint64_t timeout_ns() const { return timeout_ns_; }
  const volatile uint8_t* dead() const { return dead_.data(); }

 private:
  std::vector<std::unique_ptr<LocalDevice>> locals_;
  std::vector<Peer> peers_;
  std::vector<std::unique_ptr<char[]>> memory_;
  std::vector<uint8_t> dead_;
  uint64_t timeout_ns_;
};

}  // namespace jaccl::cuda
