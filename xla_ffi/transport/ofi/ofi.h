// The libfabric transport as the rest of the engine sees it, with or without libfabric: which
// providers there are, the one chosen, and the transport opened (transport/network.h). No
// libfabric header here: a build without libfabric compiles transport/ofi/none.cc instead of
// fabric.cc and ofi_transport.cc, and says so in every answer.
//
// Contract:
// - built() is whether this build has libfabric; library_version() its version ("1.17"; ""
//   without); list_providers() every RDM entry it offers (none without).
// - choose(provider) asks libfabric for RDM endpoints with RMA writes and 4 bytes of remote CQ
//   data (what verbs and efa carry), offering every memory-registration mode and honouring
//   whatever the provider keeps. An empty `provider` takes the first hardware provider
//   (cxi, efa, verbs;ofi_rxm: an RDMA NIC); software providers (tcp;ofi_rxm, sockets, net,
//   udp, shm) only when named. Returns nullopt (with the reason in *why) when none fits, and
//   always without libfabric.
// - open() makes the transport (transport/ofi/ofi_transport.h) for `links`, software
//   providers bound to `ip`; it throws jaccl::Error on failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/doorbell.h"
#include "transport/network.h"

namespace jaccl::ofi {

// What the chosen provider needs of us.
struct Choice {
  std::string provider;    // e.g. "tcp;ofi_rxm", "efa", "verbs;ofi_rxm"
  std::string fabric;      // fabric name (an IP network for software providers)
  std::string domain;      // NIC / domain name
  uint32_t version = 0;    // fi_version() of the library in use
  bool hardware = false;   // an RDMA NIC (not a software provider)
  bool virt_addr = false;  // FI_MR_VIRT_ADDR: targets are virtual addresses, else offsets
  bool prov_key = false;   // FI_MR_PROV_KEY: the provider picks keys
  bool mr_local = false;   // FI_MR_LOCAL: write sources must be registered too
  bool mr_endpoint = false;  // FI_MR_ENDPOINT: regions are bound to the endpoint
  size_t cq_data_size = 0;
};

// One provider entry of fi_getinfo, for jaccl-info.
struct ProviderEntry {
  std::string provider, fabric, domain;
  bool hardware = false;
  bool rma = false;          // FI_RMA offered
  size_t cq_data_size = 0;
  std::string progress;      // data progress: "auto" or "manual"
};

bool built();
std::string library_version();
std::vector<ProviderEntry> list_providers();
std::optional<Choice> choose(const std::string& provider, std::string* why);

// How the transport runs.
struct Settings {
  std::string my_name;       // how messages name this process ("process 2", JAX's number)
  int num_slots = 8;         // frames in flight per channel
  size_t payload_bytes = 0;  // per frame
  double timeout_s = 120;    // retries of refused writes, drain
  uint64_t key_seed = 0;     // memory keys where the application picks them (from the job secret)
  std::string why;           // why this provider (for the INFO line)
  std::string mode = "auto"; // "write" (RMA with CQ data), "message" (tagged), "auto": write if it works
};

// One pair (local device, device of another host): a channel each way. Indexes number the
// channels of a process (wire.h): this process's own, and the remote process's view.
struct LinkSpec {
  int64_t local_device = 0;
  int64_t remote_device = 0;
  int remote_process = 0;
  Doorbell* local_doorbell = nullptr;
  uint32_t out_index = 0;         // local -> remote among this process's outgoing channels
  uint32_t in_index = 0;          // remote -> local among this process's incoming channels
  uint32_t remote_in_index = 0;   // local -> remote among the remote process's incoming
  uint32_t remote_out_index = 0;  // remote -> local among the remote process's outgoing
  std::string remote_name;        // how messages name the remote process
};

std::unique_ptr<DataNetwork> open(const Choice& choice, const std::string& ip,
                                  const Settings& settings, const std::vector<LinkSpec>& links);

}  // namespace jaccl::ofi
