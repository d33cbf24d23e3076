// Advice about memory the engine writes but XLA allocated.
#pragma once

#include <cstddef>

namespace jaccl {

// XLA:CPU hands a large output fresh from mmap on every call (glibc returns freed big blocks
// to the kernel), and first-touching it costs a page fault per 4 KiB page. Asking for
// transparent huge pages on the untouched output makes that one fault per 2 MiB.
void prefer_huge_pages(void* data, size_t bytes);

}  // namespace jaccl
