#include "transport/ofi/ofi_transport.h"

#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/error.h"
#include "common/log.h"
#include "common/text.h"
#include "transport/link_channel.h"
#include "transport/ofi/wire.h"

namespace jaccl::ofi {
namespace {

constexpr int kBatch = 32;           // completions read per call
constexpr int kSpinPolls = 256;      // polls without progress before sleeping a little
constexpr int kIdleWaitMs = 10;      // longest sleep on the wait fd (a lost wake-up costs this)

// "between device L and device R of process P": how failures name a link.
std::string between(const LinkSpec& s) {
  return text("between device ", s.local_device, " and device ", s.remote_device, " of ",
              s.remote_name);
}

// Messages' tags: bit 63 credit, bits 32-62 the target's channel index, bits 0-31 the frame.
uint64_t message_tag(bool credit, uint32_t channel, uint32_t frame) {
  return (credit ? 1ull << 63 : 0) | (static_cast<uint64_t>(channel) << 32) | frame;
}

void* allocate_arena(size_t bytes) {
  void* p = std::aligned_alloc(4096, bytes);
  if (p == nullptr) throw_error(ErrorKind::kInternal, "out of memory for an OFI arena of ", bytes, " bytes");
  std::memset(p, 0, bytes);  // FI_MR_ALLOCATED: pages exist before they are registered
  return p;
}

std::string to_hex(const std::string& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return out;
}

}  // namespace

// A posted operation: its fi_context2 first, so the completion's op_context finds it.
struct OfiTransport::Op {
  enum Kind { kFrameOut, kCreditOut, kFrameIn, kCreditIn };
  fi_context2 context;
  Link* link = nullptr;
  Kind kind = kFrameOut;
  int slot = -1;       // the frame's slot (kFrameOut, kFrameIn)
  uint32_t frame = 0;  // the frame's number (kFrameIn)
};

struct OfiTransport::Link {
  LinkSpec spec;
  size_t index = 0;  // among this transport's links: its credit words in the arenas' scratch
  RingControl send_control{}, recv_control{};
  std::unique_ptr<RingChannel> send_ring, recv_ring;
  std::unique_ptr<Channel> sender, receiver;
  const Channel* control = nullptr;  // the TCP link between the same devices
  fi_addr_t peer = FI_ADDR_UNSPEC;
  uint64_t remote_key = 0;
  uint64_t remote_ring = 0;     // target of slot 0 of this link's channel in the peer's arena
  uint64_t remote_scratch = 0;  // where credits land there
  // The I/O thread's: sending frames, receiving credits.
  uint32_t posted = 0, credited = 0;
  std::vector<Op> ops;               // one per slot, then the credit's
  std::vector<uint8_t> in_flight;    // per slot: its write has not completed
  bool refused = false;              // the last post answered FI_EAGAIN ...
  Clock::time_point refused_since;   // ... since then
  // The I/O thread's: receiving frames, sending credits.
  uint32_t arrived_head = 0;
  std::vector<uint8_t> arrived;      // per slot: the frame is there, not yet published
  uint32_t credit_sent = 0, credit_posting = 0;
  bool credit_in_flight = false;
  std::vector<Op> receives;          // messages: one per slot, then the credit's
  uint32_t receives_posted = 0;      // messages: frames with a receive posted
  bool credit_receive_posted = false;
  // Anyone's.
  std::mutex mutex;
  std::string failure;
  std::atomic<bool> failed{false};

  std::string failure_text() {
    std::lock_guard<std::mutex> lock(mutex);
    return failure;
  }
  bool done() const {  // its peer needs nothing more from it, nor it from its peer
    return failed.load() || (control != nullptr && !control->failure().empty());
  }
};

std::string PeerInfo::encode() const {
  return text(to_hex(provider), " ", fabric.empty() ? "-" : to_hex(fabric), " ", version, " ", hardware ? 1 : 0,
              " ", to_hex(address), " ", key, " ", base, " ", in_channels, " ", num_slots, " ",
              payload_bytes, " ", mode);
}

PeerInfo PeerInfo::decode(const std::string& line) {
  std::vector<std::string> fields;
  size_t start = 0;
  while (start <= line.size()) {
    size_t end = line.find(' ', start);
    if (end == std::string::npos) end = line.size();
    fields.push_back(line.substr(start, end - start));
    start = end + 1;
  }
  if (fields.size() != 11) throw_error(ErrorKind::kMismatch, "malformed OFI peer description '", line, "'");
  PeerInfo p;
  p.provider = from_hex(fields[0]);
  p.fabric = fields[1] == "-" ? "" : from_hex(fields[1]);
  p.version = static_cast<uint32_t>(std::stoul(fields[2]));
  p.hardware = fields[3] == "1";
  p.address = from_hex(fields[4]);
  p.key = std::stoull(fields[5]);
  p.base = std::stoull(fields[6]);
  p.in_channels = static_cast<uint32_t>(std::stoul(fields[7]));
  p.num_slots = static_cast<uint32_t>(std::stoul(fields[8]));
  p.payload_bytes = std::stoull(fields[9]);
  p.mode = fields[10];
  return p;
}

OfiTransport::OfiTransport(const Choice& choice, const std::string& ip, const Settings& settings,
                           const std::vector<LinkSpec>& links)
    : settings_(settings) {
  const int slots = settings_.num_slots;
  if (slots < 1 || slots > kMaxSlots) throw_error(ErrorKind::kInvalidArgument, "OFI rings need 1..", kMaxSlots, " slots");
  frame_bytes_ = RingChannel::frame_bytes(settings_.payload_bytes);
  uint32_t outs = 0, ins = 0;
  for (const LinkSpec& l : links) {
    outs = std::max(outs, l.out_index + 1);
    ins = std::max(ins, l.in_index + 1);
  }
  if (outs > kMaxChannels || ins > kMaxChannels) {
    throw_error(ErrorKind::kInvalidArgument, "the OFI transport carries at most ", kMaxChannels,
                " channels per process each way (", std::max(outs, ins), " asked)");
  }
  // The scratch page of each arena holds one word per link: the credit it sends (send arena)
  // and, with messages, the credit it receives (receive arena).
  if (links.size() * sizeof(uint64_t) > kScratchBytes) {
    throw_error(ErrorKind::kInvalidArgument, "the OFI transport carries at most ",
                kScratchBytes / sizeof(uint64_t), " links per process (", links.size(), " asked)");
  }
  // Per link at most `slots` frames and a credit outstanding each way: room for all.
  const size_t cq_entries = links.size() * (2 * slots + 2) + 64;
  mode_ = settings_.mode == "message" ? Mode::kMessage : Mode::kWrite;
  fabric_ = Fabric::open(choice, ip, cq_entries, mode_);
  if (mode_ == Mode::kWrite) {
    const std::string problem = fabric_->writedata_problem();
    if (!problem.empty()) {
      if (settings_.mode == "write") {
        throw_error(ErrorKind::kInvalidArgument, "OFI provider ", choice.provider,
                    " cannot write with CQ data (", problem, ") and JACCL_OFI_MODE=write insists");
      }
      log(LogLevel::kInfo, "ofi: provider ", choice.provider, " cannot write with CQ data (",
          problem, "): tagged messages instead");
      fabric_.reset();
      mode_ = Mode::kMessage;
      fabric_ = Fabric::open(choice, ip, cq_entries, mode_);
    }
  }
  const size_t ring_stride = slots * frame_bytes_;
  send_bytes_ = kScratchBytes + outs * ring_stride;
  recv_bytes_ = kScratchBytes + ins * ring_stride;
  send_arena_.reset(allocate_arena(send_bytes_));
  recv_arena_.reset(allocate_arena(recv_bytes_));
  send_region_ = fabric_->register_memory(send_arena_.get(), send_bytes_, FI_WRITE | FI_SEND,
                                          settings_.key_seed ^ 1);
  recv_region_ = fabric_->register_memory(recv_arena_.get(), recv_bytes_, FI_REMOTE_WRITE | FI_RECV,
                                          settings_.key_seed ^ 2);

  by_out_.assign(outs, nullptr);
  by_in_.assign(ins, nullptr);
  auto* send_base = static_cast<unsigned char*>(send_arena_.get()) + kScratchBytes;
  auto* recv_base = static_cast<unsigned char*>(recv_arena_.get()) + kScratchBytes;
  for (const LinkSpec& spec : links) {
    auto link = std::make_unique<Link>();
    link->spec = spec;
    link->send_ring = std::make_unique<RingChannel>(
        &link->send_control, send_base + spec.out_index * ring_stride, slots,
        settings_.payload_bytes, spec.local_doorbell, &io_bell_, "ofi");
    link->recv_ring = std::make_unique<RingChannel>(
        &link->recv_control, recv_base + spec.in_index * ring_stride, slots,
        settings_.payload_bytes, &io_bell_, spec.local_doorbell, "ofi");
    // The control link's reason first: it knows an orderly exit from a crash and carries the
    // abort reason of a peer that failed; a failed operation only knows that it failed.
    auto failure = [l = link.get()] {
      std::string control = l->control != nullptr ? l->control->failure() : std::string();
      if (!control.empty()) return control;
      return l->failed.load(std::memory_order_acquire) ? l->failure_text() : std::string();
    };
    link->sender = std::make_unique<LinkChannel>(link->send_ring.get(), failure, "ofi");
    link->receiver = std::make_unique<LinkChannel>(link->recv_ring.get(), failure, "ofi");
    link->ops.resize(slots + 1);
    link->receives.resize(slots + 1);
    for (int i = 0; i <= slots; ++i) {
      link->ops[i].link = link->receives[i].link = link.get();
      link->ops[i].slot = link->receives[i].slot = i < slots ? i : -1;
      link->ops[i].kind = i < slots ? Op::kFrameOut : Op::kCreditOut;
      link->receives[i].kind = i < slots ? Op::kFrameIn : Op::kCreditIn;
    }
    link->index = links_.size();
    link->in_flight.assign(slots, 0);
    link->arrived.assign(slots, 0);
    if (by_out_[spec.out_index] != nullptr || by_in_[spec.in_index] != nullptr) {
      throw_error(ErrorKind::kInternal, "OFI channel index used twice");
    }
    by_out_[spec.out_index] = link.get();
    by_in_[spec.in_index] = link.get();
    links_.push_back(std::move(link));
  }
  // Last: nothing below throws, so the descriptors cannot leak.
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (wake_fd_ < 0 || epoll_fd_ < 0) throw_system_error("epoll/eventfd");
  io_bell_.eventfd_plus_one = wake_fd_ + 1;
  for (int fd : {wake_fd_, fabric_->wait_fd()}) {
    if (fd < 0) continue;
    epoll_event ev{};
    ev.events = EPOLLIN;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
  const Choice& c = fabric_->choice();
  log(LogLevel::kInfo, "ofi: provider ", c.provider, ", fabric ", c.fabric, ", domain ", c.domain,
      ", libfabric ", library_version(), " (", settings_.why, "): ",
      mode_ == Mode::kWrite ? "RMA writes with CQ data" : "tagged messages", ", ", links_.size(), " links, ",
      slots, " frames of ", settings_.payload_bytes >> 10, " KiB per channel, targets by ",
      c.virt_addr ? "address" : "offset", ", ", c.prov_key ? "provider" : "jaccl", " keys, ",
      fabric_->wait_fd() >= 0 ? "sleeps on the completion queue" : "polls the completion queue");
}

OfiTransport::~OfiTransport() {
  stop_.store(true, std::memory_order_release);
  ring(&io_bell_);
  if (io_thread_.joinable()) io_thread_.join();
  fabric_.reset();  // the endpoint closes first, then the regions: no write lands after this
  send_arena_.reset();
  recv_arena_.reset();
  if (wake_fd_ >= 0) close(wake_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

std::string OfiTransport::local_info() const {
  const Choice& c = fabric_->choice();
  PeerInfo me;
  me.provider = c.provider;
  me.fabric = c.fabric;
  me.version = c.version;
  me.hardware = c.hardware;
  me.address = fabric_->address();
  me.key = recv_region_.key;
  me.base = recv_region_.base;
  me.in_channels = static_cast<uint32_t>(by_in_.size());
  me.num_slots = static_cast<uint32_t>(settings_.num_slots);
  me.payload_bytes = settings_.payload_bytes;
  me.mode = mode_ == Mode::kWrite ? "write" : "message";
  return me.encode();
}

std::string OfiTransport::peer_name(int process) const {
  for (const auto& link : links_) {
    if (link->spec.remote_process == process) return link->spec.remote_name;
  }
  return text("process ", process);
}

void OfiTransport::add_peer(int process, const std::string& line) {
  const PeerInfo peer = PeerInfo::decode(line);
  const Choice& c = fabric_->choice();
  const std::string& me = settings_.my_name;
  const std::string them = peer_name(process);
  if (peer.provider != c.provider || peer.version != c.version ||
      (c.hardware && peer.fabric != c.fabric)) {
    // Software providers name their fabric after the IP network, which differs by host.
    throw_error(ErrorKind::kMismatch, "OFI: ", them, " uses provider ", peer.provider,
                " on fabric ", peer.fabric, " (libfabric ", FI_MAJOR(peer.version), ".",
                FI_MINOR(peer.version), ") but ", me, " uses ", c.provider, " on fabric ", c.fabric,
                " (libfabric ", FI_MAJOR(c.version), ".", FI_MINOR(c.version),
                "): set the same JACCL_OFI_PROVIDER, and the same libfabric, everywhere");
  }
  const std::string mine = mode_ == Mode::kWrite ? "write" : "message";
  if (peer.mode != mine) {
    throw_error(ErrorKind::kMismatch, "OFI: ", them, " moves frames by ", peer.mode,
                " but ", me, " by ", mine, " (set the same JACCL_OFI_MODE everywhere)");
  }
  if (peer.num_slots != static_cast<uint32_t>(settings_.num_slots) ||
      peer.payload_bytes != settings_.payload_bytes) {
    throw_error(ErrorKind::kMismatch, "OFI: ", them, " has rings of ", peer.num_slots,
                " x ", peer.payload_bytes, " B but ", me, " has ", settings_.num_slots, " x ",
                settings_.payload_bytes, " B: set the same JACCL_FRAME_KB and JACCL_SLOTS everywhere");
  }
  const fi_addr_t handle = fabric_->insert(peer.address);
  for (auto& link : links_) {
    if (link->spec.remote_process != process) continue;
    if (link->spec.remote_in_index >= peer.in_channels) {
      throw_error(ErrorKind::kMismatch, "OFI: ", them, " has ", peer.in_channels,
                  " incoming channels, but ", me, " writes to its channel ", link->spec.remote_in_index);
    }
    link->peer = handle;
    link->remote_key = peer.key;
    link->remote_scratch = peer.base;
    link->remote_ring = peer.base + kScratchBytes + link->spec.remote_in_index * settings_.num_slots * frame_bytes_;
  }
}

void OfiTransport::start(const std::function<const Channel*(int64_t, int64_t)>& control) {
  for (auto& link : links_) {
    const LinkSpec& s = link->spec;
    if (link->peer == FI_ADDR_UNSPEC) {
      throw_error(ErrorKind::kInternal, "OFI: no address for ", s.remote_name);
    }
    link->control = control(s.local_device, s.remote_device);
    log(LogLevel::kInfo, "ofi: link device ", s.local_device, "<->", s.remote_device, " (",
        s.remote_name, ") over ", fabric_->choice().provider, " on ", fabric_->choice().domain);
  }
  io_thread_ = std::thread([this] { io_loop(); });
}

Channel* OfiTransport::sender(int64_t local_device, int64_t remote_device) {
  for (auto& link : links_) {
    if (link->spec.local_device == local_device && link->spec.remote_device == remote_device) return link->sender.get();
  }
  return nullptr;
}

Channel* OfiTransport::receiver(int64_t remote_device, int64_t local_device) {
  for (auto& link : links_) {
    if (link->spec.local_device == local_device && link->spec.remote_device == remote_device) return link->receiver.get();
  }
  return nullptr;
}

// The I/O thread's schedule, every pass: clear its doorbell (a ring after this is seen by the
// sleep below), read the completion queue (local completions free slots, arrivals publish
// frames and credits), then post on every live link what its rings allow: frames up to
// `slots` ahead of the consumer's credit, and a credit when the consumer released frames.
// With writes outstanding it keeps polling (manual progress moves their bytes), yielding,
// then napping; with none it sleeps on the completion queue's wait fd and the doorbell.
void OfiTransport::io_loop() {
  // Naps of a few microseconds while writes are outstanding: Linux's default timer slack
  // (50 us) would stretch each one to tens of microseconds of latency.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  int idle = 0;
  bool armed = false;  // the doorbell's eventfd was cleared after the last pass with work
  while (!stop_.load(std::memory_order_acquire)) {
    bool progress = poll_completions();
    for (auto& link : links_) {
      if (link->failed.load(std::memory_order_relaxed)) continue;
      if (mode_ == Mode::kMessage) progress |= post_receives(*link);
      progress |= post_frames(*link);
      progress |= post_credit(*link);
    }
    if (draining_.load(std::memory_order_acquire)) drained_.store(drained(), std::memory_order_release);
    if (progress) {
      idle = 0;
      armed = false;
    } else if (outstanding_ > 0) {
      if (++idle < kSpinPolls) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(5));
    } else if (++idle < kSpinPolls / 4) {
      std::this_thread::yield();
    } else if (!armed) {  // clear, then one more pass: a ring after this wakes the sleep
      eventfd_t value;
      eventfd_read(wake_fd_, &value);
      armed = true;
    } else {
      wait_for_work();
      idle = 0;
      armed = false;
    }
  }
}

void OfiTransport::wait_for_work() {
  if (!fabric_->try_wait()) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    return;
  }
  epoll_event events[2];
  epoll_wait(epoll_fd_, events, 2, kIdleWaitMs);
}

bool OfiTransport::poll_completions() {
  fi_cq_data_entry entries[kBatch];
  bool progress = false;
  for (;;) {
    const ssize_t n = fi_cq_read(fabric_->completions(), entries, kBatch);
    if (n == -FI_EAGAIN) break;
    if (n == -FI_EAVAIL) {
      on_error();
      progress = true;
      continue;
    }
    if (n < 0) {
      for (auto& link : links_) fail(*link, describe("fi_cq_read", n));
      break;
    }
    for (ssize_t i = 0; i < n; ++i) {
      const fi_cq_data_entry& e = entries[i];
      if (e.flags & FI_REMOTE_WRITE) {
        on_arrival(e.data);
        continue;
      }
      auto* op = static_cast<Op*>(e.op_context);
      if (op != nullptr) complete(*op);
    }
    progress = true;
    if (n < kBatch) break;
  }
  return progress;
}

// A completion of one of our operations.
void OfiTransport::complete(Op& op) {
  Link& link = *op.link;
  switch (op.kind) {
    case Op::kFrameOut:
      --outstanding_;
      link.in_flight[op.slot] = 0;
      break;
    case Op::kCreditOut:
      --outstanding_;
      link.credit_in_flight = false;
      link.credit_sent = link.credit_posting;
      break;
    case Op::kFrameIn:
      arrived(link, op.frame);
      break;
    case Op::kCreditIn:
      link.credit_receive_posted = false;
      credit(link, static_cast<uint32_t>(static_cast<uint64_t*>(recv_arena_.get())[link.index]));
      break;
  }
}

void OfiTransport::on_arrival(uint64_t data) {
  const Immediate im = decode(data);
  const std::vector<Link*>& table = im.credit ? by_out_ : by_in_;
  if (im.channel >= table.size() || table[im.channel] == nullptr) {
    log(LogLevel::kWarn, "ofi: a write for unknown channel ", im.channel, " arrived; ignored");
    return;
  }
  Link& link = *table[im.channel];
  if (im.credit) credit(link, unwrap(link.credited, im.count));
  else arrived(link, unwrap(link.arrived_head, im.count));
}

// The consumer has released `count` frames. An older credit overtaken by a newer one counts
// beyond what was posted: ignored.
void OfiTransport::credit(Link& link, uint32_t count) {
  if (count - link.credited <= link.posted - link.credited && count != link.credited) {
    link.credited = count;
    link.send_ring->publish_tail(count);
  }
}

// Frame n is in its slot; frames are published in order.
void OfiTransport::arrived(Link& link, uint32_t n) {
  const uint32_t slots = static_cast<uint32_t>(settings_.num_slots);
  if (n - link.arrived_head >= slots) {
    fail(link, text("OFI: frame ", n, " ", between(link.spec), " arrived outside its window [",
                    link.arrived_head, ", ", link.arrived_head + slots, ")"));
    return;
  }
  link.arrived[n % slots] = 1;
  uint32_t head = link.arrived_head;
  while (link.arrived[head % slots]) {
    link.arrived[head % slots] = 0;
    ++head;
  }
  if (head != link.arrived_head) {
    link.arrived_head = head;
    link.recv_ring->publish_head(head);
  }
}

void OfiTransport::on_error() {
  fi_cq_err_entry error{};
  if (fi_cq_readerr(fabric_->completions(), &error, 0) != 1) return;  // not yet: next pass
  char detail[256] = {};
  const char* provider_text = fi_cq_strerror(fabric_->completions(), error.prov_errno,
                                             error.err_data, detail, sizeof detail);
  const std::string what = text(fi_strerror(error.err),
                                provider_text && *provider_text ? text(" (", provider_text, ")") : "");
  auto* op = static_cast<Op*>(error.op_context);
  if (op == nullptr || (error.flags & FI_REMOTE_WRITE)) {
    for (auto& link : links_) fail(*link, text("OFI: a write into ", settings_.my_name, " failed: ", what));
    return;
  }
  Link& link = *op->link;
  static const char* const kWhat[] = {"frame write", "credit write", "frame receive", "credit receive"};
  if (op->kind == Op::kFrameOut || op->kind == Op::kCreditOut) {
    --outstanding_;
    if (op->kind == Op::kFrameOut) link.in_flight[op->slot] = 0;
    else link.credit_in_flight = false;
  }
  fail(link, text("OFI: ", kWhat[op->kind], " ", between(link.spec), " failed: ", what));
}

bool OfiTransport::post_frames(Link& link) {
  const uint32_t slots = static_cast<uint32_t>(settings_.num_slots);
  const uint32_t head = link.send_ring->head();
  bool progress = false;
  while (link.posted != head && link.posted - link.credited < slots) {
    const uint32_t slot = link.posted % slots;
    if (link.in_flight[slot]) break;
    Frame* frame = link.send_ring->slot(link.posted);
    const size_t bytes = sizeof(FrameHeader) + std::min<size_t>(frame->header.nbytes, settings_.payload_bytes);
    const ssize_t rc =
        mode_ == Mode::kWrite
            ? fi_writedata(fabric_->endpoint(), frame, bytes, send_region_.desc,
                           encode(Immediate{false, link.spec.remote_in_index, static_cast<uint16_t>(link.posted)}),
                           link.peer, link.remote_ring + slot * frame_bytes_, link.remote_key,
                           &link.ops[slot].context)
            : fi_tsend(fabric_->endpoint(), frame, bytes, send_region_.desc, link.peer,
                       message_tag(false, link.spec.remote_in_index, link.posted), &link.ops[slot].context);
    if (rc == -FI_EAGAIN) {
      refused(link);
      break;
    }
    if (rc != 0) {
      fail(link, text("OFI: frame write ", between(link.spec), " failed: ",
                      describe(mode_ == Mode::kWrite ? "fi_writedata" : "fi_tsend", rc)));
      return true;
    }
    link.refused = false;
    link.in_flight[slot] = 1;
    ++link.posted;
    ++outstanding_;
    progress = true;
  }
  return progress;
}

bool OfiTransport::post_credit(Link& link) {
  if (link.credit_in_flight) return false;
  const uint32_t tail = link.recv_ring->tail();
  if (tail == link.credit_sent) return false;
  uint64_t* word = static_cast<uint64_t*>(send_arena_.get()) + link.index;  // untouched while in flight
  *word = tail;
  Op& op = link.ops[settings_.num_slots];
  const ssize_t rc =
      mode_ == Mode::kWrite
          ? fi_writedata(fabric_->endpoint(), word, sizeof(uint64_t), send_region_.desc,
                         encode(Immediate{true, link.spec.remote_out_index, static_cast<uint16_t>(tail)}),
                         link.peer, link.remote_scratch, link.remote_key, &op.context)
          : fi_tsend(fabric_->endpoint(), word, sizeof(uint64_t), send_region_.desc, link.peer,
                     message_tag(true, link.spec.remote_out_index, 0), &op.context);
  if (rc == -FI_EAGAIN) {
    refused(link);
    return false;
  }
  if (rc != 0) {
    fail(link, text("OFI: credit write ", between(link.spec), " failed: ",
                    describe(mode_ == Mode::kWrite ? "fi_writedata" : "fi_tsend", rc)));
    return true;
  }
  link.refused = false;
  link.credit_in_flight = true;
  link.credit_posting = tail;
  ++outstanding_;
  return true;
}

// Messages: a receive for every frame the ring has room for (frame n into slot n % slots, its
// tag naming it, so the order messages match in does not matter), and one for the next credit.
bool OfiTransport::post_receives(Link& link) {
  const uint32_t slots = static_cast<uint32_t>(settings_.num_slots);
  bool progress = false;
  while (link.receives_posted - link.recv_ring->tail() < slots) {
    const uint32_t n = link.receives_posted;
    Op& op = link.receives[n % slots];
    op.frame = n;
    const ssize_t rc = fi_trecv(fabric_->endpoint(), link.recv_ring->slot(n), frame_bytes_, recv_region_.desc,
                                FI_ADDR_UNSPEC, message_tag(false, link.spec.in_index, n), 0, &op.context);
    if (rc == -FI_EAGAIN) return progress;
    if (rc != 0) {
      fail(link, text("OFI: frame receive ", between(link.spec), " failed: ", describe("fi_trecv", rc)));
      return true;
    }
    ++link.receives_posted;
    progress = true;
  }
  if (!link.credit_receive_posted) {
    uint64_t* word = static_cast<uint64_t*>(recv_arena_.get()) + link.index;
    const ssize_t rc = fi_trecv(fabric_->endpoint(), word, sizeof(uint64_t), recv_region_.desc, FI_ADDR_UNSPEC,
                                message_tag(true, link.spec.out_index, 0), 0, &link.receives[slots].context);
    if (rc == 0) {
      link.credit_receive_posted = true;
      progress = true;
    } else if (rc != -FI_EAGAIN) {
      fail(link, text("OFI: credit receive ", between(link.spec), " failed: ", describe("fi_trecv", rc)));
    }
  }
  return progress;
}

// A provider answers FI_EAGAIN while it is busy (connecting, queues full), and for ever to a
// dead peer: give up after JACCL_TIMEOUT.
void OfiTransport::refused(Link& link) {
  const Clock::time_point now = Clock::now();
  if (!link.refused) {
    link.refused = true;
    link.refused_since = now;
  } else if (std::chrono::duration<double>(now - link.refused_since).count() > settings_.timeout_s) {
    fail(link, text("OFI: sends ", between(link.spec), " refused (FI_EAGAIN) for ",
                    settings_.timeout_s, " s (JACCL_TIMEOUT)"));
  }
}

void OfiTransport::fail(Link& link, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(link.mutex);
    if (link.failed.load()) return;
    link.failure = reason;
    link.failed.store(true, std::memory_order_release);
  }
  log(LogLevel::kInfo, "ofi: link device ", link.spec.local_device, "<->", link.spec.remote_device,
      " down: ", reason);
  ring(link.spec.local_doorbell);  // a device thread waiting on the link sees it now
}

bool OfiTransport::drained() const {
  for (const auto& link : links_) {
    if (link->done()) continue;
    if (link->credited != link->send_ring->head() || link->credit_in_flight ||
        link->credit_sent != link->recv_ring->tail()) {
      return false;
    }
  }
  return true;
}

void OfiTransport::drain(const Deadline& deadline) {
  if (!io_thread_.joinable()) return;
  draining_.store(true, std::memory_order_release);
  ring(&io_bell_);
  while (!drained_.load(std::memory_order_acquire) && !deadline.expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ring(&io_bell_);
  }
}

std::unique_ptr<DataNetwork> open(const Choice& choice, const std::string& ip,
                                  const Settings& settings, const std::vector<LinkSpec>& links) {
  return std::make_unique<OfiTransport>(choice, ip, settings, links);
}

}  // namespace jaccl::ofi
