#include "transport/tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <algorithm>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "common/log.h"
#include "common/text.h"
#include "transport/link_channel.h"

namespace jaccl::tcp {
namespace {

constexpr uint32_t kAbortMagic = 0x4a434142u;  // "JCAB": the sender aborted, payload = reason
constexpr uint32_t kByeMagic = 0x4a434259u;    // "JCBY": the sender's last frame on this socket
// "JCEV": the sender's call (header.comm, header.seq) timed out waiting for this link's device
constexpr uint32_t kEvictMagic = 0x4a434556u;
constexpr size_t kMaxReason = 4096;
constexpr double kHandshakeSeconds = 10;

enum class WatchKind { kListener, kWake, kPending, kStripe };

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using RingMemory = std::unique_ptr<void, AlignedFree>;

RingMemory allocate_ring(int slots, size_t payload) {
  size_t bytes = (RingChannel::ring_bytes(slots, payload) + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, bytes);
  if (p == nullptr) throw_error(ErrorKind::kInternal, "out of memory for a TCP ring");
  std::memset(p, 0, bytes);
  return RingMemory(p);
}

std::string peer_name(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "unknown peer";
  char text[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &addr.sin_addr, text, sizeof text);
  return std::string(text) + ":" + std::to_string(ntohs(addr.sin_port));
}

}  // namespace

struct Watched {
  WatchKind kind;
};

// What a stripe is writing: nothing, frame `next_send` of the sending ring, a notice (an
// eviction request or the goodbye, from control_out), or an abort's notice (its end clears the
// link's abort_unsent).
enum class Sending : uint8_t { kNothing, kFrame, kNotice, kAbort };
// What a stripe is reading: nothing yet, nothing until the consumer frees the next frame's slot
// (TCP pushes back meanwhile), a header (into that slot; the control socket's into
// control_header), the frame's payload (into the slot), or an abort's reason (into control_in).
enum class Receiving : uint8_t { kNothing, kPaused, kHeader, kPayload, kReason };

struct TcpTransport::Stripe {
  Watched watched{WatchKind::kStripe};
  Link* link = nullptr;
  int index = 0;
  bool control = false;  // the link's control socket (eviction requests), not a data stripe
  int fd = -1;
  uint32_t events = 0;
  // Sending: frame `next_send` (then += stripes), or a notice first.
  uint32_t next_send = 0;
  Sending sending = Sending::kNothing;
  bool bye_sent = false;
  const char* send_ptr = nullptr;
  size_t send_left = 0;
  std::string control_out;
  // Receiving: frame `next_recv` (then += stripes) straight into its ring slot.
  uint32_t next_recv = 0;
  Receiving receiving = Receiving::kNothing;
  char* recv_ptr = nullptr;
  size_t recv_left = 0;
  std::string control_in;
  FrameHeader control_header{};  // the control socket reads its headers here, not into a slot
};

struct TcpTransport::Link {
  LinkSpec spec;
  bool initiator = false;
  RingMemory send_memory, recv_memory;
  std::unique_ptr<RingChannel> send_ring, recv_ring;
  std::unique_ptr<Channel> sender, receiver;
  std::vector<Stripe> stripes;
  std::vector<uint8_t> sent, received;  // per slot: frame done on the wire
  uint32_t send_tail = 0, recv_head = 0;
  std::mutex mutex;  // guards failure, abort_reason and the eviction request
  std::string failure, abort_reason;
  uint32_t evict_comm = 0, evict_seq = 0;
  std::atomic<bool> failed{false}, abort_pending{false}, evict_pending{false};
  std::atomic<bool> abort_unsent{false};  // an abort notice not yet fully written to the socket

  std::string failure_text() {
    std::lock_guard<std::mutex> lock(mutex);
    return failure;
  }
};

struct TcpTransport::Pending {
  Watched watched{WatchKind::kPending};
  int fd = -1;
  std::string peer;
  Challenge challenge{};
  Hello hello{};
  size_t got = 0;
  Clock::time_point deadline;
};

namespace {

Watched listener_watch{WatchKind::kListener};
Watched wake_watch{WatchKind::kWake};

// Starts a notice on stripe s: the header, then `text` (an abort's reason).
void start_notice(TcpTransport::Stripe& s, Sending notice, const FrameHeader& h,
                  const std::string& text = "") {
  s.control_out.assign(reinterpret_cast<const char*>(&h), sizeof h);
  s.control_out += text;
  s.send_ptr = s.control_out.data();
  s.send_left = s.control_out.size();
  s.sending = notice;
}

}  // namespace

TcpTransport::TcpTransport(const std::string& ip, int port) : ip_(ip) {
  listen_fd_ = listen_on(ip, port, &port_);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) throw_system_error("epoll/eventfd");
  io_bell_.eventfd_plus_one = wake_fd_ + 1;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &listener_watch;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.ptr = &wake_watch;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
}

TcpTransport::~TcpTransport() {
  // A collective is complete for a sender once its frames are in the sending ring; let the
  // I/O thread put the last ones on the wire before it stops (a peer may still wait for them).
  if (io_thread_.joinable()) {
    const Deadline flush(std::min(settings_.timeout_s, 30.0));
    auto drained = [&] {
      for (auto& link : links_) {
        if (!link->failed.load() && link->send_ring->tail() != link->send_ring->head()) return false;
      }
      return true;
    };
    while (!drained() && !flush.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // Then say goodbye on every socket, so peers tell this orderly end from a crash.
    closing_.store(true);
    ring(&io_bell_);
    auto said_bye = [&] {
      for (auto& link : links_) {
        for (Stripe& s : link->stripes) {
          if (s.fd >= 0 && !s.bye_sent && !link->failed.load()) return false;
        }
      }
      return true;
    };
    const Deadline bye(2.0);
    while (!said_bye() && !bye.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stop_.store(true);
  ring(&io_bell_);
  if (io_thread_.joinable()) io_thread_.join();
  for (auto& link : links_) {
    for (Stripe& s : link->stripes) {
      if (s.fd >= 0) close(s.fd);
    }
  }
  for (auto& p : pending_) close(p->fd);
  for (auto& [stripe, fd] : handoff_) close(fd);
  close(listen_fd_);
  close(epoll_fd_);
  close(wake_fd_);
}

void TcpTransport::configure(const Settings& settings) {
  settings_ = settings;
  if (settings_.stripes < 1) settings_.stripes = 1;
  if (settings_.num_slots < settings_.stripes) settings_.num_slots = settings_.stripes;
  key_ = key_from_secret(settings.secret);
}

void TcpTransport::add_link(const LinkSpec& spec) {
  auto link = std::make_unique<Link>();
  link->spec = spec;
  link->initiator = spec.local_device < spec.remote_device;
  const int slots = settings_.num_slots;
  link->send_memory = allocate_ring(slots, settings_.payload_bytes);
  link->recv_memory = allocate_ring(slots, settings_.payload_bytes);
  // Sending ring: the device produces, the I/O thread drains. Receiving ring: the reverse.
  link->send_ring = std::make_unique<RingChannel>(link->send_memory.get(), slots,
                                                  settings_.payload_bytes, spec.local_doorbell,
                                                  &io_bell_, "tcp");
  link->recv_ring = std::make_unique<RingChannel>(link->recv_memory.get(), slots,
                                                  settings_.payload_bytes, &io_bell_,
                                                  spec.local_doorbell, "tcp");
  auto failure = [l = link.get()] {
    return l->failed.load(std::memory_order_acquire) ? l->failure_text() : std::string();
  };
  link->sender = std::make_unique<LinkChannel>(link->send_ring.get(), failure, "tcp");
  link->receiver = std::make_unique<LinkChannel>(link->recv_ring.get(), failure, "tcp");
  link->sent.assign(slots, 0);
  link->received.assign(slots, 0);
  link->stripes.resize(settings_.stripes + 1);  // the data stripes, then the control socket
  for (int i = 0; i <= settings_.stripes; ++i) {
    Stripe& s = link->stripes[i];
    s.link = link.get();
    s.index = i;
    s.control = i == settings_.stripes;
    s.next_send = s.next_recv = static_cast<uint32_t>(i);
  }
  expected_ += settings_.stripes + 1;
  by_devices_[{spec.local_device, spec.remote_device}] = link.get();
  links_.push_back(std::move(link));
}

TcpTransport::Link* TcpTransport::find_link(int64_t local_device, int64_t remote_device) const {
  auto it = by_devices_.find({local_device, remote_device});
  return it == by_devices_.end() ? nullptr : it->second;
}

Channel* TcpTransport::sender(int64_t local_device, int64_t remote_device) {
  Link* link = find_link(local_device, remote_device);
  return link ? link->sender.get() : nullptr;
}

Channel* TcpTransport::receiver(int64_t remote_device, int64_t local_device) {
  Link* link = find_link(local_device, remote_device);
  return link ? link->receiver.get() : nullptr;
}

void TcpTransport::connect_all(const Deadline& deadline) {
  io_thread_ = std::thread([this] { io_loop(); });
  for (auto& link : links_) {
    if (!link->initiator) continue;
    for (Stripe& stripe : link->stripes) {
      int fd = connect_to(link->spec.remote_endpoint, deadline);
      try {
        Challenge challenge;
        read_exact(fd, &challenge, sizeof challenge, deadline, "the TCP handshake");
        Hello hello{kHelloMagic, kHelloVersion, static_cast<uint32_t>(settings_.my_process),
                    static_cast<uint32_t>(stripe.index), link->spec.local_device,
                    link->spec.remote_device, 0};
        hello.tag = hello_tag(key_, challenge, hello);
        write_exact(fd, &hello, sizeof hello, deadline, "the TCP handshake");
        uint8_t ok = 0;
        read_exact(fd, &ok, 1, deadline, "the TCP handshake");
        if (ok != 1) throw_error(ErrorKind::kInternal, "handshake refused");
      } catch (...) {
        close(fd);
        throw;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      handoff_.emplace_back(&stripe, fd);
      ring(&io_bell_);
    }
  }
  std::unique_lock<std::mutex> lock(mutex_);
  bool done = connected_cv_.wait_until(lock, deadline.end(),
                                       [&] { return connected_.load() >= expected_; });
  if (!done) {
    std::string missing;
    for (auto& link : links_) {
      int up = 0;
      for (Stripe& s : link->stripes) up += s.fd >= 0;
      if (up < static_cast<int>(link->stripes.size())) {
        append(missing, " device ", link->spec.local_device, "<->", link->spec.remote_device,
               " (", link->spec.remote_name, " at ", link->spec.remote_endpoint.str(),
               ", ", up, "/", link->stripes.size(), " sockets)");
      }
    }
    throw_error(ErrorKind::kTimeout, "TCP links not up within ", deadline.seconds(), " s:",
                missing);
  }
  log(LogLevel::kInfo, "tcp: ", links_.size(), " links x ", settings_.stripes,
      " sockets (and a control socket) up, listening on ", endpoint().str());
}

void TcpTransport::broadcast_abort(const std::string& reason) {
  for (auto& link : links_) {
    if (link->failed.load()) continue;
    {
      std::lock_guard<std::mutex> lock(link->mutex);
      link->abort_reason = reason.substr(0, kMaxReason);
    }
    link->abort_unsent.store(true, std::memory_order_release);
    link->abort_pending.store(true, std::memory_order_release);
  }
  ring(&io_bell_);
}

bool TcpTransport::request_eviction(int64_t local_device, int64_t remote_device, uint32_t comm,
                                    uint32_t seq) {
  Link* link = find_link(local_device, remote_device);
  if (link == nullptr || link->failed.load()) return false;
  {
    std::lock_guard<std::mutex> lock(link->mutex);
    link->evict_comm = comm;
    link->evict_seq = seq;
  }
  link->evict_pending.store(true, std::memory_order_release);
  ring(&io_bell_);
  return true;
}

bool TcpTransport::aborts_sent() const {
  for (const auto& link : links_) {
    if (link->abort_unsent.load(std::memory_order_acquire) && !link->failed.load()) return false;
  }
  return true;
}

void TcpTransport::io_loop() {
  epoll_event events[64];
  while (!stop_.load()) {
    int n = epoll_wait(epoll_fd_, events, 64, 50);
    bool woken = false;
    for (int i = 0; i < n; ++i) {
      auto* watched = static_cast<Watched*>(events[i].data.ptr);
      switch (watched->kind) {
        case WatchKind::kListener: accept_new(); break;
        case WatchKind::kWake: {
          eventfd_t value;
          eventfd_read(wake_fd_, &value);
          woken = true;
          break;
        }
        case WatchKind::kPending: on_pending(*reinterpret_cast<Pending*>(watched)); break;
        case WatchKind::kStripe: pump(*reinterpret_cast<Stripe*>(watched)); break;
      }
    }
    std::vector<std::pair<Stripe*, int>> handed;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      handed.swap(handoff_);
    }
    for (auto& [stripe, fd] : handed) attach(*stripe, fd);
    if (woken) {
      for (auto& link : links_) {
        for (Stripe& s : link->stripes) pump(s);
      }
    }
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < pending_.size();) {
      if (now < pending_[i]->deadline) {
        ++i;
        continue;
      }
      log(LogLevel::kWarn, "tcp: dropped connection from ", pending_[i]->peer,
          ": no handshake within ", kHandshakeSeconds, " s");
      close(pending_[i]->fd);
      pending_.erase(pending_.begin() + static_cast<long>(i));
    }
  }
}

void TcpTransport::accept_new() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    auto pending = std::make_unique<Pending>();
    pending->fd = fd;
    pending->peer = peer_name(fd);
    pending->challenge = make_challenge();
    pending->deadline = Clock::now() + std::chrono::seconds(static_cast<int>(kHandshakeSeconds));
    if (send(fd, &pending->challenge, sizeof pending->challenge, MSG_DONTWAIT | MSG_NOSIGNAL) !=
        static_cast<ssize_t>(sizeof pending->challenge)) {
      close(fd);
      continue;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &pending->watched;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    pending_.push_back(std::move(pending));
  }
}

void TcpTransport::on_pending(Pending& p) {
  auto drop = [&](const std::string& why, LogLevel level) {
    log(level, "tcp: rejected connection from ", p.peer, ": ", why);
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, p.fd, nullptr);
    close(p.fd);
    pending_.erase(std::find_if(pending_.begin(), pending_.end(),
                                [&](const auto& q) { return q.get() == &p; }));
  };
  ssize_t n = recv(p.fd, reinterpret_cast<char*>(&p.hello) + p.got, sizeof p.hello - p.got,
                   MSG_DONTWAIT);
  if (n == 0) return drop("closed before the handshake ended", LogLevel::kWarn);
  if (n < 0) {
    if (errno != EAGAIN && errno != EINTR) drop(std::strerror(errno), LogLevel::kWarn);
    return;
  }
  p.got += static_cast<size_t>(n);
  if (p.got < sizeof p.hello) return;
  const Hello& h = p.hello;
  if (h.magic != kHelloMagic || h.version != kHelloVersion) {
    return drop("not a jaccl handshake (bad magic or version)", LogLevel::kWarn);
  }
  if (h.tag != hello_tag(key_, p.challenge, h)) {
    return drop("wrong job secret", LogLevel::kWarn);
  }
  Link* link = find_link(h.dst_device, h.src_device);
  if (link == nullptr || link->initiator || link->spec.remote_process != static_cast<int>(h.process) ||
      h.stripe >= link->stripes.size() || link->stripes[h.stripe].fd >= 0) {
    return drop("unexpected link (devices " + std::to_string(h.src_device) + "->" +
                    std::to_string(h.dst_device) + ", stripe " + std::to_string(h.stripe) + ")",
                LogLevel::kWarn);
  }
  const uint8_t ok = 1;
  if (send(p.fd, &ok, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1) return drop("reply failed", LogLevel::kWarn);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, p.fd, nullptr);
  int fd = p.fd;
  Stripe& stripe = link->stripes[h.stripe];
  pending_.erase(std::find_if(pending_.begin(), pending_.end(),
                              [&](const auto& q) { return q.get() == &p; }));
  attach(stripe, fd);
}

void TcpTransport::attach(Stripe& stripe, int fd) {
  set_nonblocking(fd, true);
  tune(fd, settings_.timeout_s);
  stripe.fd = fd;
  stripe.events = 0;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &stripe.watched;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  stripe.events = EPOLLIN;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    connected_.fetch_add(1);
  }
  connected_cv_.notify_all();
  pump(stripe);
}

void TcpTransport::update_interest(Stripe& stripe, bool want_read, bool want_write) {
  uint32_t events = (want_read ? EPOLLIN : 0u) | (want_write ? EPOLLOUT : 0u);
  if (stripe.fd < 0 || events == stripe.events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = &stripe.watched;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, stripe.fd, &ev);
  stripe.events = events;
}

void TcpTransport::pump(Stripe& stripe) {
  if (stripe.fd < 0) return;
  if (stripe.link->failed.load(std::memory_order_relaxed)) {
    // A failed link's control socket is still read: an eviction request may follow the abort
    // notice that failed it (they travel on different sockets).
    while (stripe.control && stripe.fd >= 0 && pump_control(stripe)) {
    }
    return;
  }
  bool moved = true;
  while (moved && stripe.fd >= 0) moved = pump_send(stripe) | pump_receive(stripe);
  if (stripe.fd >= 0) {
    update_interest(stripe, stripe.receiving != Receiving::kPaused,
                    stripe.sending != Sending::kNothing);
  }
}

// Writes the next frame or notice of this stripe; true when bytes moved. An eviction request
// goes on the control socket, an abort notice on data stripe 0 after the frames before it,
// the goodbye on every socket once the process is closing and its frames are out.
bool TcpTransport::pump_send(Stripe& s) {
  Link& link = *s.link;
  RingChannel& ring = *link.send_ring;
  if (s.sending == Sending::kNothing) {
    FrameHeader h{};
    if (s.control && link.evict_pending.exchange(false)) {
      h.magic = kEvictMagic;
      {
        std::lock_guard<std::mutex> lock(link.mutex);
        h.comm = link.evict_comm;
        h.seq = link.evict_seq;
      }
      start_notice(s, Sending::kNotice, h);
    } else if (s.index == 0 && link.abort_pending.exchange(false)) {
      std::string reason;
      {
        std::lock_guard<std::mutex> lock(link.mutex);
        reason = link.abort_reason;
      }
      h.magic = kAbortMagic;
      h.nbytes = static_cast<uint32_t>(reason.size());
      start_notice(s, Sending::kAbort, h, reason);
    } else if (s.control || static_cast<int32_t>(ring.head() - s.next_send) <= 0) {
      if (!closing_.load() || s.bye_sent) return false;
      h.magic = kByeMagic;
      start_notice(s, Sending::kNotice, h);
      s.bye_sent = true;
    } else {
      const Frame* frame = ring.slot(s.next_send);
      s.send_ptr = reinterpret_cast<const char*>(frame);
      s.send_left = sizeof(FrameHeader) + frame->header.nbytes;
      s.sending = Sending::kFrame;
    }
  }
  ssize_t n = send(s.fd, s.send_ptr, s.send_left, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n < 0) {
    if (errno != EAGAIN && errno != EINTR) fail(link, socket_error(link, "send"));
    return false;
  }
  s.send_ptr += n;
  s.send_left -= static_cast<size_t>(n);
  if (s.send_left > 0) return n > 0;
  const Sending sent = s.sending;
  s.sending = Sending::kNothing;
  if (sent == Sending::kAbort) link.abort_unsent.store(false, std::memory_order_release);
  if (sent != Sending::kFrame) return true;
  const int slots = ring.num_slots();
  link.sent[s.next_send % slots] = 1;
  s.next_send += static_cast<uint32_t>(settings_.stripes);
  uint32_t tail = link.send_tail;
  while (tail != ring.head() && link.sent[tail % slots]) link.sent[tail++ % slots] = 0;
  if (tail != link.send_tail) {
    link.send_tail = tail;
    ring.publish_tail(tail);
  }
  return true;
}

// Reads into the next frame's slot of this stripe; true when bytes moved.
bool TcpTransport::pump_receive(Stripe& s) {
  if (s.control) return pump_control(s);
  Link& link = *s.link;
  RingChannel& ring = *link.recv_ring;
  const int slots = ring.num_slots();
  if (s.receiving == Receiving::kNothing || s.receiving == Receiving::kPaused) {
    if (static_cast<int32_t>(s.next_recv - (ring.tail() + slots)) >= 0) {
      s.receiving = Receiving::kPaused;  // the consumer is behind: let TCP push back
      return false;
    }
    s.recv_ptr = reinterpret_cast<char*>(&ring.slot(s.next_recv)->header);
    s.recv_left = sizeof(FrameHeader);
    s.receiving = Receiving::kHeader;
  }
  ssize_t n = recv(s.fd, s.recv_ptr, s.recv_left, MSG_DONTWAIT);
  if (n == 0) {
    fail(link, "connection closed by " + link.spec.remote_name + " (it exited or was killed)");
    return false;
  }
  if (n < 0) {
    if (errno != EAGAIN && errno != EINTR) fail(link, socket_error(link, "recv"));
    return false;
  }
  s.recv_ptr += n;
  s.recv_left -= static_cast<size_t>(n);
  if (s.recv_left > 0) return true;
  Frame* frame = ring.slot(s.next_recv);
  if (s.receiving == Receiving::kHeader) {
    const FrameHeader& h = frame->header;
    if (h.magic == kFrameMagic && h.nbytes <= ring.payload_capacity()) {
      s.receiving = Receiving::kPayload;
      s.recv_ptr = reinterpret_cast<char*>(frame->payload());
      s.recv_left = h.nbytes;
    } else if (h.magic == kByeMagic) {
      s.receiving = Receiving::kNothing;
      finish(s);
      return false;
    } else if (h.magic == kAbortMagic && h.nbytes <= kMaxReason) {
      s.receiving = Receiving::kReason;
      s.control_in.assign(h.nbytes, '\0');
      s.recv_ptr = s.control_in.data();
      s.recv_left = h.nbytes;
    } else {
      fail(link, "malformed frame (magic " + std::to_string(h.magic) + ", " +
                     std::to_string(h.nbytes) + " bytes)");
      return false;
    }
    if (s.recv_left > 0) return true;
  }
  const Receiving received = s.receiving;
  s.receiving = Receiving::kNothing;
  if (received == Receiving::kReason) {
    fail(link, link.spec.remote_name + " failed: " + s.control_in);
    return false;
  }
  link.received[s.next_recv % slots] = 1;
  s.next_recv += static_cast<uint32_t>(settings_.stripes);
  uint32_t head = link.recv_head;
  while (link.received[head % slots]) link.received[head++ % slots] = 0;
  if (head != link.recv_head) {
    link.recv_head = head;
    ring.publish_head(head);
  }
  return true;
}

// Reads the control socket: eviction requests, which no frame queues behind (a full
// receiving ring pauses only the data stripes), and the goodbye. Its end says nothing of the
// link: the data stripes report a peer's death in order, after the frames it sent.
bool TcpTransport::pump_control(Stripe& s) {
  Link& link = *s.link;
  if (s.receiving == Receiving::kNothing) {
    s.recv_ptr = reinterpret_cast<char*>(&s.control_header);
    s.recv_left = sizeof s.control_header;
    s.receiving = Receiving::kHeader;
  }
  ssize_t n = recv(s.fd, s.recv_ptr, s.recv_left, MSG_DONTWAIT);
  if (n <= 0) {
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) finish(s);
    return false;
  }
  s.recv_ptr += n;
  s.recv_left -= static_cast<size_t>(n);
  if (s.recv_left > 0) return true;
  s.receiving = Receiving::kNothing;
  const FrameHeader& h = s.control_header;
  if (h.magic == kEvictMagic && h.nbytes == 0) {
    if (on_eviction_) on_eviction_(link.spec.local_device, h.comm, h.seq, link.spec.remote_name);
    return true;
  }
  if (h.magic != kByeMagic) {
    fail(link, "malformed control message (magic " + std::to_string(h.magic) + ")");
  }
  finish(s);
  return false;
}

// The peer said goodbye on this socket (or closed the control socket): nothing more will come
// on it. Once every data stripe of the link is finished, a device still waiting on it learns
// the peer has left.
void TcpTransport::finish(Stripe& stripe) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, stripe.fd, nullptr);
  close(stripe.fd);
  stripe.fd = -1;
  Link& link = *stripe.link;
  for (const Stripe& s : link.stripes) {
    if (s.fd >= 0 && !s.control) return;
  }
  fail(link, link.spec.remote_name + " finished and closed its connections");
}

std::string TcpTransport::socket_error(const Link& link, const char* call) const {
  const int err = errno;
  const std::string& process = link.spec.remote_name;
  if (err == ECONNRESET || err == EPIPE) {
    return "connection reset by " + process + " (it exited or was killed)";
  }
  return std::string(call) + " to " + process + " failed: " + std::strerror(err);
}

void TcpTransport::fail(Link& link, const std::string& reason) {
  if (link.failed.load()) return;
  {
    std::lock_guard<std::mutex> lock(link.mutex);
    link.failure = reason;
  }
  link.failed.store(true, std::memory_order_release);
  log(LogLevel::kInfo, "tcp: link device ", link.spec.local_device, "<->", link.spec.remote_device,
      " down: ", reason);
  for (Stripe& s : link.stripes) {
    if (s.fd < 0) continue;
    if (s.control) {  // read on until the peer closes it (pump())
      update_interest(s, true, false);
      continue;
    }
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, s.fd, nullptr);
    close(s.fd);
    s.fd = -1;
  }
  ring(link.spec.local_doorbell);
}

}  // namespace jaccl::tcp
