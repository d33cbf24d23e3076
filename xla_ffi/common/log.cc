#include "common/log.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>

namespace jaccl {

LogLevel log_level() {
  static const LogLevel level = [] {
    const char* env = std::getenv("JACCL_DEBUG");
    if (env == nullptr) return LogLevel::kWarn;
    if (strcasecmp(env, "NONE") == 0) return LogLevel::kNone;
    if (strcasecmp(env, "INFO") == 0) return LogLevel::kInfo;
    if (strcasecmp(env, "TRACE") == 0) return LogLevel::kTrace;
    return LogLevel::kWarn;
  }();
  return level;
}

void log_line(LogLevel level, const std::string& line) {
  static const char* const kNames[] = {"", "WARN", "INFO", "TRACE"};
  std::fprintf(stderr, "jaccl %d %s %s\n", static_cast<int>(getpid()),
               kNames[static_cast<int>(level)], line.c_str());
  std::fflush(stderr);
}

bool first_time(const std::string& key) {
  static std::mutex mutex;
  static std::unordered_set<std::string> seen;
  std::lock_guard<std::mutex> lock(mutex);
  return seen.insert(key).second;
}

}  // namespace jaccl
