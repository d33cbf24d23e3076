#include "comm/network_channels.h"

#include "common/error.h"

namespace jaccl {

NetworkChannels::NetworkChannels(const WorldConfig& config)
    : out_(config.processes.size()), in_(config.processes.size()) {
  auto host = [&](const DeviceInfo& d) -> const std::string& { return config.processes[d.process].host; };
  for (const DeviceInfo& mine : config.devices) {
    for (const DeviceInfo& other : config.devices) {
      if (host(other) == host(mine)) continue;
      Table& out = out_[mine.process];
      out.emplace(std::make_pair(mine.id, other.id), static_cast<uint32_t>(out.size()));
      Table& in = in_[mine.process];
      in.emplace(std::make_pair(other.id, mine.id), static_cast<uint32_t>(in.size()));
    }
  }
}

uint32_t NetworkChannels::find(const Table& table, int process, int64_t src, int64_t dst,
                               const char* what) {
  auto it = table.find({src, dst});
  if (it == table.end()) {
    throw_error(ErrorKind::kInternal, "device ", src, " -> ", dst, " is not an ", what,
                " network channel of process ", process);
  }
  return it->second;
}

uint32_t NetworkChannels::out_index(int process, int64_t src, int64_t dst) const {
  return find(out_.at(process), process, src, dst, "outgoing");
}

uint32_t NetworkChannels::in_index(int process, int64_t src, int64_t dst) const {
  return find(in_.at(process), process, src, dst, "incoming");
}

}  // namespace jaccl
