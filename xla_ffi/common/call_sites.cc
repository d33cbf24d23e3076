#include "common/call_sites.h"

#include <mutex>
#include <unordered_map>

#include "common/text.h"

namespace jaccl {
namespace {

struct Sites {
  std::mutex mutex;
  std::unordered_map<uint32_t, std::string> names;
};

Sites& sites() {
  static Sites* s = new Sites;  // never freed: handlers may name sites during exit
  return *s;
}

}  // namespace

void name_site(uint32_t site, const std::string& name) {
  Sites& s = sites();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.names[site] = name;
}

std::string site_name(uint32_t site) {
  Sites& s = sites();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.names.find(site);
  if (it != s.names.end()) return it->second;
  return text("call site ", hex(site));
}

std::string at_site(uint32_t site) { return site == 0 ? std::string() : " at " + site_name(site); }

}  // namespace jaccl
