// A set of disjoint groups of devices that run collectives together: the
// groups a mesh axis (or tuple of axes) cuts the mesh into.
//
// Contract: built from a table of global device ids, group_size per row, in
// rank order (a group smaller than others ends its row with -1s); every
// process builds the same table at trace time, so the id (communicator_id(): a
// hash of the table, the space, the lane and the split round) is the same
// everywhere; jaccl's lowering computes it once (through _jaccl) and every call
// carries it. Each local device sees its own group through a Member view: its
// rank, the channels to and from every other rank, and its collective sequence
// number. A Member is used by one call at a time (the device lock of its lane:
// collectives/run.h), so it needs no lock. In a world that shares channels, a
// member's channels are streams of them (transport/shared_channel.h), named by
// the communicator's channel stream, so members of communicators of different
// channel streams may use one pair of devices at once: jaccl's communicators of
// one table in different lanes (comm/lanes.h), and every communicator of the
// mpiabi library's space.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <memory>

#include "comm/spaces.h"
#include "transport/doorbell.h"
#include "transport/transport.h"

namespace jaccl {

class World;
struct DirectGroup;

// The id of the communicator of a group table in `space`, `lane` and `split_round`
// (World::communicator): one multiply per table entry. Equal arguments give equal ids in every
// process; a collision is caught by Communicator::matches().
uint64_t communicator_id(const int64_t* table, size_t size, int group_size, Space space,
                         uint32_t lane, uint64_t split_round);

class Communicator {
 public:
  struct Member {
    int rank = 0;
    int size = 1;
    std::vector<int64_t> devices;   // the group, in rank order
    std::vector<Channel*> to;       // to[r]: frames for rank r (nullptr for self)
    std::vector<Channel*> from;     // from[r]: frames from rank r
    std::vector<int> processes;     // processes of the other ranks, for health checks
    std::vector<int> hosts;         // host of every rank, numbered in order of appearance
    int num_hosts = 1;
    bool hierarchical = false;      // hosts x equal local ranks, more than one of each
    // Ranks per process when the group is processes x equal runs of consecutive ranks, more than
    // one of each (the layout all_reduce's cascade takes); 0 otherwise.
    int process_run = 0;
    Doorbell* doorbell = nullptr;   // this device's
    uint32_t seq = 0;               // collectives run so far
    // This device's entry of its call board (transport/shm/host_memory.h), which run_call() sets to
    // `seq` as each collective starts; null when the board had no room.
    std::atomic<uint32_t>* calls_entered = nullptr;
    std::vector<uint32_t> sent;     // point-to-point streams sent to each rank so far
    std::vector<uint32_t> received;  // and received from each rank
    DirectGroup* direct = nullptr;  // set when every member is a device of this process
    uint64_t direct_barriers = 0;   // barriers this member passed in direct collectives
    std::vector<char> scratch;      // grows as needed; reused from call to call
    std::vector<float> accumulator;  // float32 sums of the MoE combine, reused likewise
  };

  // `space`: the sequence space its calls are numbered in (jaccl's own ops, or XLA's
  // collectives through the mpiabi library: abi/host_abi.h).
  // `lane`: the lane of jaccl's own calls it carries (comm/lanes.h).
  Communicator(World& world, uint64_t id, const int64_t* table, size_t size, int group_size,
               Space space = Space::kOwnOps, uint32_t lane = 0);
  ~Communicator();

  uint64_t id() const { return id_; }
  // The channel stream its frames carry (FrameHeader::channel_stream), which names its streams
  // of shared channels (transport/shared_channel.h): for jaccl's own ops the call lane (so the
  // communicators of one lane share its streams and stay in order with each other); for XLA's
  // collectives one of its own, the id's low 31 bits with the top bit set, when the world
  // gives them streams of their own (World::xla_streams()), else 0.
  uint32_t channel_stream() const { return channel_stream_; }
  // " (XLA's collectives)" for the mpiabi library's space, else "": for log lines after the id.
  const char* space_label() const;
  bool matches(const int64_t* table, size_t size, int group_size) const;
  // The view of a local device; throws if the device is in no group.
  Member& member(int64_t device);
  std::string describe_rank(const Member& member, int rank) const;

 private:
  Channel* channel(int64_t src, int64_t dst, int src_rank);

  World& world_;
  uint64_t id_;
  Space space_;
  uint32_t channel_stream_;
  int group_size_;
  std::vector<int64_t> table_;
  std::unordered_map<int64_t, Member> members_;
  std::vector<std::unique_ptr<DirectGroup>> direct_groups_;
  std::vector<std::unique_ptr<Channel>> streams_;  // when the world shares channels
};

}  // namespace jaccl
