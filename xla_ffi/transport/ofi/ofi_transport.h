// The OFI transport: channels between devices on different hosts over libfabric (RDMA NICs
// through verbs, efa or cxi; the tcp provider where there is none).
//
// Each channel is a ring of `slots` frames at both ends. The producer fills the frame in its
// local send ring (registered memory) and commits; the I/O thread writes it with
// fi_writedata into the same slot of the consumer's receive ring (wire.h says where, and what
// the 32-bit immediate carries), at most `slots` frames ahead of the consumer's credit. The
// consumer's I/O thread learns of each frame from its completion queue, publishes frames in
// order (writes may arrive out of order), and when the device thread releases frames it
// writes one credit back (the new release count; at most one credit in flight per channel,
// so neither ring nor completion queue can overrun). No copy beyond the rings, no
// handshake per frame. A provider that cannot write with CQ data (probed at start) moves
// frames as tagged messages instead: the consumer keeps a receive posted for every frame its
// ring has room for (the tag names channel and frame, the buffer is the frame's slot) and
// credits travel as 8-byte messages; everything else is the same.
//
// Progress is manual on most providers (data lands only when the target polls), so one I/O
// thread per process owns the endpoint: it posts, polls and publishes; device threads only
// move ring counters and ring its doorbell. It spins while writes are outstanding and sleeps
// on the completion queue's wait fd and its doorbell otherwise.
//
// Liveness: libfabric says little about a dead peer, so every channel also reports the
// failure of its control channel (the TCP link between the same devices, which carries
// aborts and goodbyes), and every retry of a refused write has the JACCL_TIMEOUT deadline.
// Failed writes fail their link, naming the peer process.
//
// Threading: construct, local_info(), add_peer() from the bootstrap thread; start() begins
// the I/O thread; then the channels are used by device threads. drain() before the control
// links say goodbye; the destructor stops the thread and closes the endpoint first.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "transport/doorbell.h"
#include "transport/network.h"
#include "transport/ofi/fabric.h"
#include "transport/ring_channel.h"

namespace jaccl::ofi {

// What a process tells the others (through the key-value store) so they can write to it.
struct PeerInfo {
  std::string provider, fabric;
  uint32_t version = 0;
  bool hardware = false;
  std::string address;  // endpoint name, raw bytes
  uint64_t key = 0;     // of its receive arena
  uint64_t base = 0;    // target address of the arena's first byte (0: offsets)
  uint32_t in_channels = 0;
  uint32_t num_slots = 0;
  uint64_t payload_bytes = 0;
  std::string mode;     // "write" or "message"
  std::string encode() const;  // one line of text
  static PeerInfo decode(const std::string& text);
};

class OfiTransport : public DataNetwork {
 public:
  OfiTransport(const Choice& choice, const std::string& ip, const Settings& settings,
               const std::vector<LinkSpec>& links);
  ~OfiTransport() override;
  OfiTransport(const OfiTransport&) = delete;
  OfiTransport& operator=(const OfiTransport&) = delete;

  std::string local_info() const override;
  // Checks `info` against this process (provider, version, ring geometry) and adds the peer.
  void add_peer(int process, const std::string& info) override;
  // `control(local, remote)` is the control link's channel whose failure() a data channel
  // between the same devices also reports. Starts the I/O thread.
  void start(const std::function<const Channel*(int64_t local, int64_t remote)>& control) override;

  Channel* sender(int64_t local_device, int64_t remote_device) override;
  Channel* receiver(int64_t remote_device, int64_t local_device) override;

  // Waits until every frame sent was released by its consumer and every release of ours
  // was credited back (or the link failed), at most until the deadline.
  void drain(const Deadline& deadline) override;

  struct Link;
  struct Op;

 private:
  std::string peer_name(int process) const;  // its links' remote_name
  void io_loop();
  bool poll_completions();
  bool post_frames(Link& link);
  bool post_credit(Link& link);
  bool post_receives(Link& link);
  void complete(Op& op);
  void arrived(Link& link, uint32_t frame);
  void credit(Link& link, uint32_t count);
  void refused(Link& link);
  void on_arrival(uint64_t data);
  void on_error();
  void fail(Link& link, const std::string& reason);
  void wait_for_work();
  bool drained() const;

  Settings settings_;
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  // Declared before fabric_: freed after it (the regions registered on them close first).
  std::unique_ptr<void, Free> send_arena_, recv_arena_;
  std::unique_ptr<Fabric> fabric_;
  Mode mode_ = Mode::kWrite;
  size_t frame_bytes_ = 0;
  size_t send_bytes_ = 0, recv_bytes_ = 0;
  Region send_region_, recv_region_;
  std::vector<std::unique_ptr<Link>> links_;
  std::vector<Link*> by_out_, by_in_;                 // by this process's channel index
  Doorbell io_bell_{};
  int wake_fd_ = -1, epoll_fd_ = -1;
  uint64_t outstanding_ = 0;  // writes posted and not completed (I/O thread only)
  std::atomic<bool> stop_{false}, draining_{false}, drained_{false};
  std::thread io_thread_;
};

}  // namespace jaccl::ofi
