#include "comm/host_links.h"

#include <algorithm>
#include <optional>

#include "comm/network_channels.h"
#include "common/clock.h"
#include "common/error.h"
#include "transport/ofi/ofi.h"
#include "transport/ofi/wire.h"

namespace jaccl {

HostLinks::HostLinks(const WorldConfig& config, std::unique_ptr<tcp::TcpTransport> tcp,
                     Topology topology)
    : config_(config), topology_(std::move(topology)), tcp_(std::move(tcp)) {
  if (config_.network == Network::kOfi && !topology_.pairs.empty()) open_data_network();
}

HostLinks::~HostLinks() {
  // Frames in flight over libfabric land before the control links say goodbye; the data
  // network goes first, since its I/O thread reads the control links' state.
  if (data_) data_->drain(Deadline(std::min(config_.timeout_s, 30.0)));
  data_.reset();
  tcp_.reset();
}

void HostLinks::open_data_network() {
  std::string why;
  std::optional<ofi::Choice> choice = ofi::choose(config_.ofi_provider, &why);
  if (!choice) throw_error(ErrorKind::kInvalidArgument, "JACCL_TRANSPORT=ofi: ", why);
  const NetworkChannels numbers(config_);
  const int me = config_.my_process;
  std::vector<ofi::LinkSpec> links;
  for (const auto& [local, remote] : topology_.pairs) {
    const int peer = topology_.process_of(remote);
    links.push_back(ofi::LinkSpec{local, remote, peer, topology_.doorbell(local),
                                  numbers.out_index(me, local, remote), numbers.in_index(me, remote, local),
                                  numbers.in_index(peer, local, remote), numbers.out_index(peer, remote, local),
                                  topology_.process_name(peer)});
  }
  ofi::Settings settings;
  settings.my_name = topology_.process_name(me);
  // At least as deep as TCP's rings (connect()), and at least 4 MiB in flight per channel:
  // TCP's socket buffers hold that much, libfabric's window is the ring (measured on unlimited
  // emulated links: 64 KiB frames reached 0.46 GB/s each way with 8 slots).
  settings.num_slots = static_cast<int>(std::min<size_t>(
      ofi::kMaxSlots, std::max<size_t>(2 * config_.num_slots, (size_t{4} << 20) / config_.payload_bytes)));
  settings.payload_bytes = config_.payload_bytes;
  settings.timeout_s = config_.timeout_s;
  settings.key_seed = std::hash<std::string>()(config_.secret) & ~uint64_t{0xff};
  settings.why = config_.ofi_why;
  settings.mode = config_.ofi_mode;
  data_ = ofi::open(*choice, config_.ip, settings, links);
}

std::string HostLinks::local_info() const { return data_ ? data_->local_info() : std::string(); }

void HostLinks::add_peer(int process, const std::string& info) {
  if (data_) data_->add_peer(process, info);
}

std::vector<HostLinks::Link> HostLinks::connect(const EvictionHandler& on_eviction_request) {
  std::vector<tcp::LinkSpec> links;
  for (const auto& [local, remote] : topology_.pairs) {
    const int peer = topology_.process_of(remote);
    const std::string& endpoint = config_.endpoints.size() > static_cast<size_t>(peer)
                                      ? config_.endpoints[peer]
                                      : std::string();
    if (endpoint.empty() || tcp_ == nullptr) {
      throw_error(ErrorKind::kInvalidArgument, topology_.process_name(peer),
                  " is on another host but ", tcp_ ? "announced no TCP endpoint" :
                  "this process has no TCP transport");
    }
    links.push_back(tcp::LinkSpec{local, remote, peer, tcp::Endpoint::parse(endpoint),
                                  topology_.doorbell(local), topology_.process_name(peer)});
  }
  if (links.empty()) return {};
  tcp::Settings settings;
  settings.my_process = config_.my_process;
  settings.secret = config_.secret;
  settings.stripes = config_.tcp_stripes;
  // Deeper rings than shared memory: a network link with loss recovery needs more bytes in
  // flight to stay busy (measured on rate-limited emulated links: 8 frames kept the mesh
  // all_reduce at ~92% of the link-rate bound at 16 MiB where 4 gave ~80%).
  settings.num_slots = 2 * config_.num_slots;
  settings.payload_bytes = config_.payload_bytes;
  settings.timeout_s = config_.timeout_s;
  if (data_) {  // control only
    settings.stripes = 1;
    settings.num_slots = 2;
    settings.payload_bytes = 4096;
  }
  tcp_->configure(settings);
  tcp_->on_eviction_request(on_eviction_request);
  for (const tcp::LinkSpec& link : links) tcp_->add_link(link);
  tcp_->connect_all(Deadline(config_.timeout_s));
  DataNetwork* frames = data_.get();
  if (frames != nullptr) {
    frames->start([this](int64_t local, int64_t remote) -> const Channel* {
      return tcp_->sender(local, remote);
    });
  }
  std::vector<Link> channels;
  for (const tcp::LinkSpec& link : links) {
    const int64_t local = link.local_device, remote = link.remote_device;
    channels.push_back(Link{local, remote, frames ? frames->sender(local, remote)
                                                  : tcp_->sender(local, remote)});
    channels.push_back(Link{remote, local, frames ? frames->receiver(remote, local)
                                                  : tcp_->receiver(remote, local)});
  }
  return channels;
}

}  // namespace jaccl
