// The TCP transport: channels between devices on different hosts.
//
// A link joins one local device and one remote device and carries frames both ways over
// `stripes` sockets: frame i of a direction travels on socket i % stripes, so several
// connections share a link's bandwidth while both ends still agree on the order. Each
// direction has a ring in local memory: the device thread fills and drains it through the
// Channel contract exactly as with shared memory; one I/O thread per process moves the
// bytes with non-blocking sockets and epoll (a frame on the wire is its 64-byte header and
// `nbytes` of payload, read straight into the receiving ring's slot). A full receiving ring
// stops reading that socket, so TCP's own flow control pushes back on the sender. Beside the
// stripes each link has a control socket, always read, for eviction requests: a process whose
// ring is full because it stalled before the call still hears that it was asked to leave.
//
// Connections are opened by the link end with the smaller device id and authenticated
// with the job secret (handshake.h); anything else that connects is dropped and logged.
// A closed or broken socket fails its link: the channels report it through failure(), and
// a process that aborts sends an abort frame with its reason on every link first (after an
// eviction request, when its deadline found the link's remote device missing from a call: the
// remote process's handler, on the I/O thread, decides). A process
// that shuts down puts its last frames on the wire and then a goodbye frame on every socket,
// so its peers read everything it sent before they see the link end.
//
// Threading: configure() and add_link() before connect_all(); after that the I/O thread
// owns the sockets and the channels may be used by the device threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "transport/doorbell.h"
#include "transport/ring_channel.h"
#include "transport/tcp/handshake.h"
#include "transport/tcp/socket.h"

namespace jaccl::tcp {

struct Settings {
  int my_process = 0;
  std::string secret;        // hex, from the key-value store
  int stripes = 2;           // data sockets per link (the control socket besides)
  int num_slots = 4;         // frames per ring
  size_t payload_bytes = 0;  // per frame
  double timeout_s = 120;    // TCP_USER_TIMEOUT and connect deadline
};

struct LinkSpec {
  int64_t local_device = 0;
  int64_t remote_device = 0;
  int remote_process = 0;
  Endpoint remote_endpoint;
  Doorbell* local_doorbell = nullptr;
  std::string remote_name;  // how messages name the remote process ("process 2", JAX's number)
};

class TcpTransport {
 public:
  // Listens on ip:port (port 0: any free port).
  TcpTransport(const std::string& ip, int port);
  ~TcpTransport();
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  Endpoint endpoint() const { return Endpoint{ip_, port_}; }
  void configure(const Settings& settings);
  void add_link(const LinkSpec& spec);
  Channel* sender(int64_t local_device, int64_t remote_device);    // local -> remote
  Channel* receiver(int64_t remote_device, int64_t local_device);  // remote -> local

  // Starts the I/O thread, opens this side's connections and waits for every stripe of
  // every link to be up, or throws at the deadline naming what is missing.
  void connect_all(const Deadline& deadline);
  void broadcast_abort(const std::string& reason);
  // A peer's call `seq` of the communicator whose id's low 32 bits are `comm` timed out
  // waiting for `local_device` and asks this process to leave if that device never reached
  // it (JACCL_EVICT_STALLED; World::evict_if_absent()). Set before connect_all(); runs on the
  // I/O thread; `from` names the asking process.
  using EvictionHandler = std::function<void(int64_t local_device, uint32_t comm, uint32_t seq,
                                             const std::string& from)>;
  void on_eviction_request(EvictionHandler handler) { on_eviction_ = std::move(handler); }
  // Sends that request to the process of `remote_device`, on the control socket of the link
  // from `local_device`; false (nothing sent) without such a link, or a failed one.
  bool request_eviction(int64_t local_device, int64_t remote_device, uint32_t comm, uint32_t seq);
  // True once every live link has written the last abort notice to its socket (so a process
  // that exits right after still tells its peers why).
  bool aborts_sent() const;

  struct Link;
  struct Stripe;
  struct Pending;

 private:
  void io_loop();
  void accept_new();
  void on_pending(Pending& pending);
  void attach(Stripe& stripe, int fd);
  void pump(Stripe& stripe);
  bool pump_send(Stripe& stripe);
  bool pump_receive(Stripe& stripe);
  bool pump_control(Stripe& stripe);
  void fail(Link& link, const std::string& reason);
  void finish(Stripe& stripe);
  std::string socket_error(const Link& link, const char* call) const;  // from errno
  void update_interest(Stripe& stripe, bool want_read, bool want_write);
  Link* find_link(int64_t local_device, int64_t remote_device) const;

  std::string ip_;
  int port_ = 0;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd behind io_bell_
  Doorbell io_bell_{};
  Settings settings_;
  SecretKey key_{};
  std::vector<std::unique_ptr<Link>> links_;
  std::map<std::pair<int64_t, int64_t>, Link*> by_devices_;  // (local, remote)
  std::vector<std::unique_ptr<Pending>> pending_;            // accepted, not yet authenticated

  std::mutex mutex_;  // guards handoff_ and wakes connect_all()
  std::condition_variable connected_cv_;
  std::vector<std::pair<Stripe*, int>> handoff_;  // sockets this side connected
  std::atomic<int> connected_{0};
  int expected_ = 0;
  std::atomic<bool> stop_{false}, closing_{false};
  EvictionHandler on_eviction_;
  std::thread io_thread_;
};

}  // namespace jaccl::tcp
