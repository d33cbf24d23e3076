#include "common/process.h"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <string>

namespace jaccl {

bool pid_alive(int pid) {
  if (pid <= 0) return true;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  auto close_paren = line.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= line.size()) return true;
  char state = line[close_paren + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace jaccl
