// One process's libfabric objects: an RDM endpoint with its address vector, completion queue
// and registered memory, for the provider transport/ofi/ofi.h chose.
//
// Contract:
// - Fabric::open() makes fabric, domain, address vector, completion queue (with a wait fd
//   where the provider has one) and endpoint, and enables the endpoint: for RMA writes with
//   CQ data (Mode::kWrite), or for tagged messages (Mode::kMessage, the fallback of providers
//   that cannot write with CQ data). Software providers bind to `ip` (the address jaccl's TCP
//   listener uses); hardware providers pick their NIC themselves.
// - writedata_problem() writes 8 bytes with CQ data to the endpoint itself: "" when both
//   completions arrive, else what went wrong (some providers advertise CQ data they cannot
//   deliver: cxi before libfabric 2.5 answered -FI_ENOSYS).
// - After open(), one thread at a time uses a Fabric (the transport's I/O thread; the
//   bootstrap before it starts): the domain is opened with FI_THREAD_DOMAIN.
// - Errors throw jaccl::Error naming the libfabric call and its fi_strerror().
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/ofi/ofi.h"

namespace jaccl::ofi {

enum class Mode { kWrite, kMessage };

bool is_software(const std::string& provider);  // tcp;ofi_rxm, sockets, net, udp, shm

// A registered region: what a peer needs to write into it, and what a local write needs.
struct Region {
  struct fid_mr* mr = nullptr;
  void* desc = nullptr;
  uint64_t key = 0;
  uint64_t base = 0;  // the target address of its first byte: its address, or 0 (offsets)
};

class Fabric {
 public:
  // `ip` is used by software providers only (empty: any); the completion queue holds
  // `cq_entries` (what the transport can have outstanding, with room to spare).
  static std::unique_ptr<Fabric> open(const Choice& choice, const std::string& ip, size_t cq_entries,
                                      Mode mode);
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  const Choice& choice() const { return choice_; }
  std::string address() const;                     // this endpoint's name (raw bytes)
  fi_addr_t insert(const std::string& address);    // a peer's name -> its handle
  // Registers [data, data + bytes) for `access` (FI_WRITE, FI_REMOTE_WRITE); `key` is used
  // where the application picks keys. Freed with the Fabric.
  Region register_memory(void* data, size_t bytes, uint64_t access, uint64_t key);

  struct fid_ep* endpoint() const { return ep_; }
  struct fid_cq* completions() const { return cq_; }
  int wait_fd() const { return wait_fd_; }  // readable when the CQ may have entries; -1: none
  bool try_wait();                           // fi_trywait: true when blocking on wait_fd() is safe
  std::string writedata_problem();

 private:
  Fabric() = default;

  Choice choice_;
  struct fi_info* info_ = nullptr;
  struct fid_fabric* fabric_ = nullptr;
  struct fid_domain* domain_ = nullptr;
  struct fid_av* av_ = nullptr;
  struct fid_cq* cq_ = nullptr;
  struct fid_ep* ep_ = nullptr;
  int wait_fd_ = -1;
  std::vector<struct fid_mr*> regions_;
  alignas(64) uint64_t probe_words_[2] = {};
};

// "fi_writedata: Resource temporarily unavailable (-11)"
std::string describe(const char* call, long error);

}  // namespace jaccl::ofi
