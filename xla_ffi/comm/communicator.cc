#include "comm/communicator.h"

#include <algorithm>

#include "comm/direct_group.h"
#include "comm/layouts.h"
#include "comm/world.h"
#include "common/error.h"
#include "common/text.h"
#include "transport/shared_channel.h"

namespace jaccl {

uint64_t communicator_id(const int64_t* table, size_t size, int group_size, Space space,
                         uint32_t lane, uint64_t split_round) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(group_size);
  for (size_t i = 0; i < size; ++i) {
    h = (h ^ static_cast<uint64_t>(table[i])) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return h + static_cast<uint64_t>(space) * 0x9e3779b97f4a7c15ull +
         static_cast<uint64_t>(lane) * 0xc2b2ae3d27d4eb4full + split_round * 0x165667b19e3779f9ull;
}

Communicator::Communicator(World& world, uint64_t id, const int64_t* table, size_t size,
                           int group_size, Space space, uint32_t lane)
    : world_(world),
      id_(id),
      space_(space),
      channel_stream_(space == Space::kOwnOps ? lane
                      : world.xla_streams()    ? (static_cast<uint32_t>(id) | 0x80000000u)
                                               : 0),
      group_size_(group_size),
      table_(table, table + size) {
  if (group_size <= 0 || size % group_size != 0) {
    throw_error(ErrorKind::kInvalidArgument, "group table of ", size,
                " devices does not split into groups of ", group_size);
  }
  for (size_t row = 0; row < size; row += group_size) {
    // A row is one group's devices in rank order, padded at its end with -1 where groups
    // differ in size (jax.lax's uneven axis_index_groups of a reduction).
    const int64_t* devices = table + row;
    const int n = static_cast<int>(std::find(devices, devices + group_size, -1) - devices);
    if (n == 0 || std::any_of(devices + n, devices + group_size, [](int64_t d) { return d != -1; })) {
      throw_error(ErrorKind::kInvalidArgument, "group table row ", row / group_size,
                  " is not devices followed by -1 padding");
    }
    DirectGroup* direct = nullptr;
    if (std::all_of(devices, devices + n, [&](int64_t d) { return world.is_local(d); })) {
      direct_groups_.push_back(std::make_unique<DirectGroup>(n));
      direct = direct_groups_.back().get();
      for (int rank = 0; rank < n; ++rank) {
        direct->doorbells.push_back(world.doorbell(devices[rank]));
      }
    }
    for (int rank = 0; rank < n; ++rank) {
      const int64_t device = devices[rank];
      if (!world.is_local(device)) continue;
      if (members_.count(device)) {
        throw_error(ErrorKind::kInvalidArgument, "device ", device, " appears twice in a group table");
      }
      Member m;
      m.rank = rank;
      m.size = n;
      m.devices.assign(devices, devices + n);
      m.to.resize(n, nullptr);
      m.from.resize(n, nullptr);
      m.calls_entered = world.calls_entered_counter(device, id);
      for (int r = 0; r < n; ++r) {
        if (r == rank) continue;
        m.to[r] = channel(device, m.devices[r], rank);
        m.from[r] = channel(m.devices[r], device, r);
        int p = world.device(m.devices[r]).process;
        if (p != world.my_process() &&
            std::find(m.processes.begin(), m.processes.end(), p) == m.processes.end()) {
          m.processes.push_back(p);
        }
      }
      std::vector<std::string> host_names;
      for (int64_t d : m.devices) {
        const std::string& name = world.host_of(d);
        auto it = std::find(host_names.begin(), host_names.end(), name);
        m.hosts.push_back(static_cast<int>(it - host_names.begin()));
        if (it == host_names.end()) host_names.push_back(name);
      }
      m.num_hosts = static_cast<int>(host_names.size());
      std::vector<int64_t> process_of_rank, host_of_rank(m.hosts.begin(), m.hosts.end());
      for (int64_t d : m.devices) process_of_rank.push_back(world.device(d).process);
      m.hierarchical = spans_hosts_evenly(host_of_rank);
      m.process_run = process_run(process_of_rank);
      m.doorbell = world.doorbell(device);
      m.direct = direct;
      members_.emplace(device, std::move(m));
    }
  }
}

// The channel from `src` to `dst` that carries frames of this communicator's rank `src_rank`:
// the transport's own, or a stream of it when the world shares channels.
Channel* Communicator::channel(int64_t src, int64_t dst, int src_rank) {
  if (!world_.shares_channels()) return world_.channel(src, dst);
  const uint64_t stream =
      SharedChannel::stream_of(channel_stream_, static_cast<uint32_t>(src_rank));
  streams_.push_back(world_.shared_channel(src, dst)->stream(stream));
  return streams_.back().get();
}

const char* Communicator::space_label() const {
  return space_ != Space::kOwnOps ? " (XLA's collectives)" : "";  // the one other space so far
}

Communicator::~Communicator() = default;

bool Communicator::matches(const int64_t* table, size_t size, int group_size) const {
  return group_size == group_size_ && size == table_.size() &&
         std::equal(table_.begin(), table_.end(), table);
}

Communicator::Member& Communicator::member(int64_t device) {
  auto it = members_.find(device);
  if (it == members_.end()) {
    throw_error(ErrorKind::kInvalidArgument, "device ", device,
                " is not in this collective's groups (is the mesh the one the op was traced with?)");
  }
  return it->second;
}

std::string Communicator::describe_rank(const Member& member, int rank) const {
  return text("rank ", rank, " (", world_.describe_device(member.devices[rank]), ")");
}

}  // namespace jaccl
