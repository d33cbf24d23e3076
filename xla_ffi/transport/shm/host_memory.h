// The memory the processes of one host share: one segment per process.
//
// Layout of a process's segment: a SegmentHeader (identity and the abort board), one Doorbell
// per device of the process, one CallBoard per device of the process, then one ring per
// (local destination device, source device on this host): rings[dst_local][src_host_index].
// Every process of the host computes the same layout from the world's configuration (each
// process's from its own number of devices), so a sender finds its ring in the receiver's
// segment without asking.
//
// Contract: HostMemory(...) creates this process's segment, "/jaccl-<job tag>-<process>" when
// other processes of the host map it (else private memory), and writes its header; attach()
// maps a peer's, checks its header against this process's settings (throws kMismatch
// naming what differs) and records whether this process can read the peer's memory in place; unlink_own() removes the name once every peer has mapped it (the
// mappings stay). header(), doorbell(), board() and ring() point into a mapped segment: null
// for a process not mapped (one of another host). Not thread-safe until every attach() is done;
// read-only after.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/doorbell.h"
#include "transport/shm/segment.h"

namespace jaccl {

constexpr uint64_t kSegmentMagic = 0x6a6163636c736567ull;  // "jacclseg"
constexpr uint32_t kSegmentVersion = 3;
// Processes of a host whose readability a segment records (single_copy.h); those numbered
// past it move their bytes through frames.
constexpr int kReadableProcesses = 1024;

// Set once by the first device thread of a process that fails; read by peers.
struct AbortBoard {
  std::atomic<uint32_t> state;  // 0 = fine, 1 = being written, 2 = reason readable
  char reason[1020];
};

// How far a device has come in each of its communicators, for the peers of its host to read
// when a call of theirs times out (collectives/waiter.cc names the ranks that never reached
// it). Entry i is claimed for a communicator id by the device's first call of it (a CAS on
// `comm`, never released); `entered` is then written by that communicator's member alone: the
// number of its collectives the device has entered. A device of more communicators than
// entries sets `overflowed`, and readers then know nothing of the ones without an entry.
constexpr int kCallBoardEntries = 32;

struct CallBoardEntry {
  std::atomic<uint64_t> comm;      // 0: free
  std::atomic<uint32_t> entered;
  uint32_t unused;
};

struct CallBoard {
  std::atomic<uint32_t> overflowed;
  uint32_t unused[3];
  CallBoardEntry entries[kCallBoardEntries];
};

struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t process;
  int32_t pid;
  uint32_t num_local_devices;
  uint32_t num_host_devices;
  uint32_t num_slots;
  uint64_t payload_bytes;
  uint64_t total_bytes;
  uint64_t own_address;  // where the owner maps this segment, and a random value the peers
  uint64_t nonce;        // read there in the owner's memory to learn that they can
  alignas(64) AbortBoard abort;
  // readable[p]: whether this segment's owner can read process p's memory in place
  // (transport/shm/single_copy.h): 0 not asked, 1 yes, 2 no. Written as the owner attaches p.
  std::atomic<uint8_t> readable[kReadableProcesses];
};

struct HostSegmentLayout {
  size_t num_local_devices;
  size_t num_host_devices;
  int num_slots;
  size_t payload_bytes;

  size_t doorbells_offset() const;
  size_t boards_offset() const;
  size_t rings_offset() const;
  size_t ring_bytes() const;
  size_t total_bytes() const;
  size_t ring_offset(size_t dst_local, size_t src_host_index) const;
};

class HostMemory {
 public:
  HostMemory() = default;
  // `layouts`: by process index (those of processes on other hosts are never used); `shared`:
  // whether another process of this host maps this one's segment.
  HostMemory(const std::string& job_tag, int me, std::vector<HostSegmentLayout> layouts,
             bool shared);

  // Maps the segment of `process` (of this host), whose header must carry `pid` and this
  // process's frame size and slots.
  void attach(int process, int32_t pid);
  void unlink_own() { own_.unlink(); }
  // Whether `reader` (this process or one attached) recorded that it can read `owner`'s
  // memory in place; false until it attached `owner`.
  bool readable(int reader, int owner) const;
  const std::string& own_name() const { return own_.name(); }
  size_t own_bytes() const { return own_.size(); }

  SegmentHeader* header(int process) const;
  Doorbell* doorbell(int process, size_t local_device) const;
  CallBoard* board(int process, size_t local_device) const;
  // The ring of frames from this host's device `src_host_index` to `dst_process`'s device
  // `dst_local`.
  void* ring(int dst_process, size_t dst_local, size_t src_host_index) const;

 private:
  unsigned char* base(int process) const;

  std::string job_tag_;
  int me_ = 0;
  std::vector<HostSegmentLayout> layouts_;
  Segment own_;
  std::vector<Segment> peers_;  // by process index; empty when not mapped
};

}  // namespace jaccl
