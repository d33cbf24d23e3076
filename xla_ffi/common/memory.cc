#include "common/memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace jaccl {

void prefer_huge_pages(void* data, size_t bytes) {
  constexpr uintptr_t kHuge = 2u << 20;
  if (bytes < 2 * kHuge) return;
  uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

namespace {

constexpr size_t kReleaseAtLeast = 1u << 20;  // below this, memset is cheaper than the check

// Whether [begin, end) lies in one private anonymous mapping ("rw-p", no file), per
// /proc/self/maps: only there do released pages come back as zeros.
bool private_anonymous(uintptr_t begin, uintptr_t end) {
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return false;
  char line[512];
  bool inside = false;
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    unsigned long lo = 0, hi = 0, offset = 0, inode = 0;
    char perms[8] = {0}, device[16] = {0};
    int path_at = 0;
    if (std::sscanf(line, "%lx-%lx %7s %lx %15s %lu %n", &lo, &hi, perms, &offset, device, &inode,
                    &path_at) < 6) {
      continue;
    }
    if (begin < lo || begin >= hi) continue;
    const char* path = line + path_at;
    const bool anonymous = inode == 0 && (*path == '\n' || *path == 0 || std::strncmp(path, "[heap]", 6) == 0);
    inside = end <= hi && anonymous && perms[0] == 'r' && perms[1] == 'w' && perms[3] == 'p';
    break;
  }
  std::fclose(maps);
  return inside;
}

}  // namespace

void zero_fill(void* data, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(data), stop = start + bytes;
  const uintptr_t begin = (start + page - 1) & ~(page - 1), end = stop & ~(page - 1);
  if (end <= begin || end - begin < kReleaseAtLeast || !private_anonymous(begin, end) ||
      madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) != 0) {
    std::memset(data, 0, bytes);
    return;
  }
  std::memset(data, 0, begin - start);
  std::memset(reinterpret_cast<void*>(end), 0, stop - end);
}

}  // namespace jaccl
