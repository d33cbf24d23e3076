// Advice about memory the engine writes but XLA allocated.
#pragma once

#include <cstddef>

namespace jaccl {

// XLA:CPU hands a large output fresh from mmap on every call (glibc returns freed big blocks
// to the kernel), and first-touching it costs a page fault per 4 KiB page. Asking for
// transparent huge pages on the untouched output makes that one fault per 2 MiB.
void prefer_huge_pages(void* data, size_t bytes);

// Makes `bytes` at `data` read as zeros. Whole pages of a private anonymous mapping (what
// malloc and XLA:CPU's outputs are) are handed back to the kernel (madvise MADV_DONTNEED),
// which maps them to zero pages on the next access, so nobody page-faults memory only to
// write zeros into it; the rest, and any other kind of memory, is memset.
void zero_fill(void* data, size_t bytes);

}  // namespace jaccl
