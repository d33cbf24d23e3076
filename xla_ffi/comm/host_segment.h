// The memory one process shares with the other processes of its host.
//
// Layout: a SegmentHeader (identity and the abort board), one Doorbell per
// device of the process, one CallBoard per device of the process, then one ring
// per (local destination device, source device on this host):
// rings[dst_local][src_host_index]. Every process of the host computes the same
// layout from the WorldConfig (each process's from its own number of devices),
// so a sender finds its ring in the receiver's segment without asking.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transport/doorbell.h"

namespace jaccl {

constexpr uint64_t kSegmentMagic = 0x6a6163636c736567ull;  // "jacclseg"
constexpr uint32_t kSegmentVersion = 2;

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
  alignas(64) AbortBoard abort;
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

}  // namespace jaccl
