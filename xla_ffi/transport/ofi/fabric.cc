#include "transport/ofi/fabric.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "common/text.h"

namespace jaccl::ofi {
namespace {

constexpr uint32_t kApiVersion = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
constexpr size_t kImmediateBytes = 4;  // what verbs and efa carry: the wire format fits in it
// Hardware providers in order of preference; anything else with a NIC follows them.
const char* const kHardware[] = {"cxi", "efa", "verbs;ofi_rxm"};

// Frees an fi_info list on scope exit.
struct InfoList {
  fi_info* head = nullptr;
  ~InfoList() {
    if (head != nullptr) fi_freeinfo(head);
  }
};

void check(const char* call, int rc) {
  if (rc != 0) throw_error(ErrorKind::kInternal, "libfabric: ", describe(call, rc));
}

// RDM endpoints that write with remote CQ data (or, Mode::kMessage, send tagged messages);
// `provider` empty = any.
fi_info* make_hints(const std::string& provider, Mode mode = Mode::kWrite) {
  fi_info* hints = fi_allocinfo();
  if (hints == nullptr) throw_error(ErrorKind::kInternal, "libfabric: fi_allocinfo failed");
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = mode == Mode::kWrite ? FI_RMA | FI_WRITE | FI_REMOTE_WRITE : FI_TAGGED | FI_SEND | FI_RECV;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  if (mode == Mode::kWrite) hints->domain_attr->cq_data_size = kImmediateBytes;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  if (!provider.empty()) hints->fabric_attr->prov_name = strdup(provider.c_str());
  return hints;
}

bool link_down(const fi_info* info) {
  return info->nic != nullptr && info->nic->link_attr != nullptr &&
         info->nic->link_attr->state == FI_LINK_DOWN;
}

// Rank of a hardware provider (lower is better); -1 for software ones.
int hardware_rank(const fi_info* info) {
  const std::string name = info->fabric_attr->prov_name;
  if (is_software(name)) return -1;
  for (size_t i = 0; i < sizeof(kHardware) / sizeof(kHardware[0]); ++i) {
    if (name == kHardware[i]) return static_cast<int>(i);
  }
  return info->nic != nullptr ? 100 : -1;  // an unknown provider counts only with a NIC
}

Choice choice_of(const fi_info* info) {
  Choice c;
  c.provider = info->fabric_attr->prov_name;
  c.fabric = info->fabric_attr->name ? info->fabric_attr->name : "";
  c.domain = info->domain_attr->name ? info->domain_attr->name : "";
  c.version = fi_version();
  c.hardware = hardware_rank(info) >= 0;
  const uint64_t mode = info->domain_attr->mr_mode;
  c.virt_addr = mode & FI_MR_VIRT_ADDR;
  c.prov_key = mode & FI_MR_PROV_KEY;
  c.mr_local = mode & FI_MR_LOCAL;
  c.mr_endpoint = mode & FI_MR_ENDPOINT;
  c.cq_data_size = info->domain_attr->cq_data_size;
  return c;
}

}  // namespace

std::string describe(const char* call, long error) {
  const long e = error < 0 ? -error : error;
  return text(call, ": ", fi_strerror(static_cast<int>(e)), " (", -e, ")");
}

bool built() { return true; }

bool is_software(const std::string& provider) {
  for (const char* prefix : {"tcp", "sockets", "net", "udp", "shm", "ofi_rxd"}) {
    if (provider.compare(0, std::strlen(prefix), prefix) == 0) return true;
  }
  return provider.find("ofi_rxd") != std::string::npos || provider.find("ofi_mrail") != std::string::npos;
}

std::string library_version() {
  const uint32_t v = fi_version();
  return text(FI_MAJOR(v), ".", FI_MINOR(v));
}

std::vector<ProviderEntry> list_providers() {
  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  hints->mode = ~0ull;
  InfoList list;
  fi_getinfo(kApiVersion, nullptr, nullptr, 0, hints, &list.head);
  fi_freeinfo(hints);
  std::vector<ProviderEntry> entries;
  std::set<std::string> seen;
  for (const fi_info* i = list.head; i != nullptr; i = i->next) {
    ProviderEntry e;
    e.provider = i->fabric_attr->prov_name;
    e.fabric = i->fabric_attr->name ? i->fabric_attr->name : "";
    e.domain = i->domain_attr->name ? i->domain_attr->name : "";
    if (!seen.insert(e.provider + "|" + e.fabric + "|" + e.domain).second) continue;
    e.hardware = hardware_rank(i) >= 0;
    e.rma = i->caps & FI_RMA;
    e.cq_data_size = i->domain_attr->cq_data_size;
    e.progress = i->domain_attr->data_progress == FI_PROGRESS_AUTO ? "auto" : "manual";
    entries.push_back(e);
  }
  return entries;
}

std::optional<Choice> choose(const std::string& provider, std::string* why) {
  fi_info* hints = make_hints(provider);
  InfoList list;
  const int rc = fi_getinfo(kApiVersion, nullptr, nullptr, 0, hints, &list.head);
  fi_freeinfo(hints);
  const fi_info* best = nullptr;
  int best_rank = 1 << 30;
  std::string skipped;
  for (const fi_info* i = rc == 0 ? list.head : nullptr; i != nullptr; i = i->next) {
    const std::string name = i->fabric_attr->prov_name;
    if (i->domain_attr->cq_data_size < kImmediateBytes) {
      append(skipped, " ", name, " (", i->domain_attr->cq_data_size, " bytes of CQ data)");
      continue;
    }
    if (link_down(i)) {
      append(skipped, " ", name, " on ", i->domain_attr->name, " (link down)");
      continue;
    }
    const int rank = hardware_rank(i);
    if (provider.empty() && rank < 0) continue;  // software only when named
    const int order = provider.empty() ? rank : 0;
    if (best == nullptr || order < best_rank) {
      best = i;
      best_rank = order;
    }
  }
  if (best == nullptr) {
    if (why != nullptr) {
      *why = provider.empty()
                 ? text("no RDMA provider (cxi, efa, verbs;ofi_rxm) with RMA writes and CQ data",
                        skipped.empty() ? "" : ":", skipped)
                 : text("libfabric offers no RDM endpoint of provider '", provider,
                        "' with RMA writes and 4 bytes of CQ data",
                        rc != 0 ? text(" (", describe("fi_getinfo", rc), ")") : skipped);
    }
    return std::nullopt;
  }
  return choice_of(best);
}

std::unique_ptr<Fabric> Fabric::open(const Choice& choice, const std::string& ip, size_t cq_entries,
                                     Mode mode) {
  std::unique_ptr<Fabric> f(new Fabric);
  fi_info* hints = make_hints(choice.provider, mode);
  const bool bind_ip = !choice.hardware && !ip.empty();
  const int rc = fi_getinfo(kApiVersion, bind_ip ? ip.c_str() : nullptr, nullptr,
                            bind_ip ? FI_SOURCE : 0, hints, &f->info_);
  fi_freeinfo(hints);
  check("fi_getinfo", rc);
  f->choice_ = choice_of(f->info_);
  check("fi_fabric", fi_fabric(f->info_->fabric_attr, &f->fabric_, nullptr));
  check("fi_domain", fi_domain(f->fabric_, f->info_, &f->domain_, nullptr));
  fi_av_attr av{};
  av.type = FI_AV_TABLE;
  check("fi_av_open", fi_av_open(f->domain_, &av, &f->av_, nullptr));
  fi_cq_attr cq{};
  cq.format = FI_CQ_FORMAT_DATA;
  cq.size = cq_entries;
  cq.wait_obj = FI_WAIT_FD;
  if (fi_cq_open(f->domain_, &cq, &f->cq_, nullptr) != 0) {  // no wait fd: poll
    cq.wait_obj = FI_WAIT_NONE;
    check("fi_cq_open", fi_cq_open(f->domain_, &cq, &f->cq_, nullptr));
  } else if (fi_control(&f->cq_->fid, FI_GETWAIT, &f->wait_fd_) != 0) {
    f->wait_fd_ = -1;
  }
  check("fi_endpoint", fi_endpoint(f->domain_, f->info_, &f->ep_, nullptr));
  check("fi_ep_bind (av)", fi_ep_bind(f->ep_, &f->av_->fid, 0));
  check("fi_ep_bind (cq)", fi_ep_bind(f->ep_, &f->cq_->fid, FI_TRANSMIT | FI_RECV));
  check("fi_enable", fi_enable(f->ep_));
  return f;
}

Fabric::~Fabric() {
  // The endpoint first: it drops what is still outstanding; then what it used.
  if (ep_ != nullptr) fi_close(&ep_->fid);
  for (fid_mr* mr : regions_) fi_close(&mr->fid);
  if (cq_ != nullptr) fi_close(&cq_->fid);
  if (av_ != nullptr) fi_close(&av_->fid);
  if (domain_ != nullptr) fi_close(&domain_->fid);
  if (fabric_ != nullptr) fi_close(&fabric_->fid);
  if (info_ != nullptr) fi_freeinfo(info_);
}

std::string Fabric::address() const {
  char name[256];
  size_t length = sizeof name;
  check("fi_getname", fi_getname(&ep_->fid, name, &length));
  return std::string(name, length);
}

fi_addr_t Fabric::insert(const std::string& address) {
  fi_addr_t handle = FI_ADDR_UNSPEC;
  const int n = fi_av_insert(av_, address.data(), 1, &handle, 0, nullptr);
  if (n != 1) throw_error(ErrorKind::kInternal, "libfabric: fi_av_insert of a peer failed (", n, ")");
  return handle;
}

Region Fabric::register_memory(void* data, size_t bytes, uint64_t access, uint64_t key) {
  Region r;
  check("fi_mr_reg", fi_mr_reg(domain_, data, bytes, access, 0, key, 0, &r.mr, nullptr));
  regions_.push_back(r.mr);
  if (choice_.mr_endpoint) {
    check("fi_mr_bind", fi_mr_bind(r.mr, &ep_->fid, 0));
    check("fi_mr_enable", fi_mr_enable(r.mr));
  }
  r.desc = fi_mr_desc(r.mr);
  r.key = fi_mr_key(r.mr);
  r.base = choice_.virt_addr ? reinterpret_cast<uint64_t>(data) : 0;
  return r;
}

bool Fabric::try_wait() {
  fid* cq = &cq_->fid;
  return wait_fd_ >= 0 && fi_trywait(fabric_, &cq, 1) == FI_SUCCESS;
}

// One 8-byte fi_writedata to this endpoint itself; both completions must arrive.
std::string Fabric::writedata_problem() {
  uint64_t* words = probe_words_;
  Region r = register_memory(words, sizeof probe_words_, FI_WRITE | FI_REMOTE_WRITE, 0x6a63636c70726f62ull);
  const fi_addr_t self = insert(address());
  fi_context2 context{};
  const Deadline deadline(10);
  ssize_t rc;
  while ((rc = fi_writedata(ep_, &words[0], sizeof(uint64_t), r.desc, 0x5a5a, self,
                            r.base + sizeof(uint64_t), r.key, &context)) == -FI_EAGAIN) {
    fi_cq_data_entry entry;
    fi_cq_read(cq_, &entry, 1);
    if (deadline.expired()) break;
  }
  if (rc != 0) return describe("fi_writedata", rc);
  bool sent = false, arrived = false;
  while (!(sent && arrived)) {
    fi_cq_data_entry entry;
    const ssize_t n = fi_cq_read(cq_, &entry, 1);
    if (n == 1) {
      if (entry.flags & FI_REMOTE_WRITE) arrived = entry.data == 0x5a5a;
      if (entry.op_context == &context) sent = true;
    } else if (n == -FI_EAVAIL) {
      fi_cq_err_entry error{};
      fi_cq_readerr(cq_, &error, 0);
      return text("a write with CQ data to itself failed: ", fi_strerror(error.err));
    } else if (deadline.expired()) {
      return "a write with CQ data to itself did not complete within 10 s";
    } else {
      std::this_thread::yield();
    }
  }
  return "";
}

}  // namespace jaccl::ofi
