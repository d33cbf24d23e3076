// The engine table of abi/mpiabi_table.h, filled from the world and the engine's codes.
#include "abi/mpiabi_attach.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "abi/mpiabi_table.h"
#include "collectives/kinds.h"
#include "comm/communicator.h"
#include "comm/world.h"
#include "common/call_sites.h"
#include "common/dtype.h"
#include "common/error.h"
#include "common/reduce.h"

namespace jaccl {
namespace {

int32_t dtype_code(const char* name) {
  for (int d = 0; d < static_cast<int>(Dtype::kCount); ++d) {
    if (std::strcmp(dtype_name(static_cast<Dtype>(d)), name) == 0) return d;
  }
  return -1;
}

uint64_t xla_communicator_id(const int64_t* group, size_t size, uint64_t split_round) {
  return communicator_id(group, size, static_cast<int>(size), Space::kXlaCollectives, 0,
                         split_round);
}

int32_t reduce_code(const char* name) {
  for (int op = 0; op < static_cast<int>(ReduceOp::kCount); ++op) {
    if (std::strcmp(reduce_op_name(static_cast<ReduceOp>(op)), name) == 0) return op;
  }
  return -1;
}

}  // namespace

void attach_mpiabi(const std::string& path) {
  World& world = World::require();
  const WorldConfig& config = world.config();
  const size_t processes = config.processes.size();
  // Lives until exit: the mpiabi library keeps pointers into it.
  static std::vector<int64_t> devices;
  static JacclMpiEngine table;
  std::vector<std::vector<int64_t>> of_process(processes);
  for (const DeviceInfo& d : config.devices) of_process[d.process].push_back(d.id);
  const size_t per_process = of_process[0].size();
  for (size_t p = 0; p < processes; ++p) {
    if (of_process[p].size() != per_process || per_process == 0) {
      throw_error(ErrorKind::kInvalidArgument, "XLA's collectives on jaccl need the same number "
                  "of CPU devices in every process; process 0 has ", per_process, ", process ", p,
                  " has ", of_process[p].size());
    }
    std::sort(of_process[p].begin(), of_process[p].end());
  }
  if (per_process > 1 && !world.xla_streams()) {
    throw_error(ErrorKind::kInternal, "XLA's collectives on ", per_process, " devices per "
                "process need a world that shares channels");
  }
  devices.clear();
  for (const auto& ids : of_process) devices.insert(devices.end(), ids.begin(), ids.end());
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) {
    throw_error(ErrorKind::kInvalidArgument, "the mpiabi library ", path, " is not loaded (was "
                "MPITRAMPOLINE_LIB set before jax was imported?)");
  }
  auto attach = reinterpret_cast<JacclMpiAttach>(dlsym(lib, "jaccl_mpiabi_attach"));
  if (attach == nullptr) {
    dlclose(lib);
    throw_error(ErrorKind::kInvalidArgument, path, " has no jaccl_mpiabi_attach");
  }
  name_site(kJacclMpiabiSplitSite, "MPI_Comm_split (XLA making the communicator of a group of "
            "its devices)");
  table.version = kJacclMpiEngineVersion;
  table.my_process = config.my_process;
  table.num_processes = static_cast<int32_t>(processes);
  table.devices_per_process = static_cast<int32_t>(per_process);
  table.devices = devices.data();
  table.timeout_s = config.timeout_s;
  table.kind_all_reduce = static_cast<int32_t>(CollectiveKind::kAllReduce);
  table.kind_reduce_scatter = static_cast<int32_t>(CollectiveKind::kReduceScatter);
  table.kind_all_gather = static_cast<int32_t>(CollectiveKind::kAllGather);
  table.dtype_code = dtype_code;
  table.reduce_code = reduce_code;
  table.communicator_id = xla_communicator_id;
  table.run_call = jaccl_run_host_call;
  table.run_p2p = jaccl_run_host_p2p;
  table.raise_abort = jaccl_raise_abort;
  table.world_failed = jaccl_world_failed;
  char error[1024] = {0};
  const int rc = attach(&table, error, sizeof error);
  dlclose(lib);  // the trampoline's reference keeps it loaded
  if (rc != 0) throw_error(ErrorKind::kInvalidArgument, error);
}

}  // namespace jaccl
