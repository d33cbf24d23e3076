#include "common/memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
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

}  // namespace

void zero_fill(void* data, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(data), stop = start + bytes;
  const uintptr_t begin = (start + page - 1) & ~(page - 1), end = stop & ~(page - 1);
  void* pages = reinterpret_cast<void*>(begin);
  // MADV_FREE is refused (EINVAL) unless every page lies in a private anonymous mapping, the
  // only kind whose released pages come back as zeros: it doubles as that check (a file's
  // private pages would come back with the file's bytes). MADV_DONTNEED then releases them.
  if (end <= begin || end - begin < kReleaseAtLeast ||
      madvise(pages, end - begin, MADV_FREE) != 0 ||
      madvise(pages, end - begin, MADV_DONTNEED) != 0) {
    std::memset(data, 0, bytes);
    return;
  }
  std::memset(data, 0, begin - start);
  std::memset(reinterpret_cast<void*>(end), 0, stop - end);
}

}  // namespace jaccl
