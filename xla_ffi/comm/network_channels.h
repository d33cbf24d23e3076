// The channels between devices of different hosts, numbered per process the same way by
// every process (the OFI transport's writes name their target channel by these numbers).
//
// Contract: a process's outgoing channels are (src, dst) with src one of its devices and dst
// a device on another host, ordered by src then dst in the WorldConfig's device order; its
// incoming channels are (src, dst) with dst one of its devices and src on another host,
// ordered by dst then src. out_index()/in_index() give a channel's position; they throw for a
// pair that is not such a channel.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "comm/world_config.h"

namespace jaccl {

class NetworkChannels {
 public:
  explicit NetworkChannels(const WorldConfig& config);
  uint32_t out_index(int process, int64_t src, int64_t dst) const;
  uint32_t in_index(int process, int64_t src, int64_t dst) const;

 private:
  using Table = std::map<std::pair<int64_t, int64_t>, uint32_t>;
  static uint32_t find(const Table& table, int process, int64_t src, int64_t dst, const char* what);
  std::vector<Table> out_, in_;  // by process
};

}  // namespace jaccl
