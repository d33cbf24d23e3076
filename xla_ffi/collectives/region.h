// Where a run of elements lives in local memory: `count` elements laid out in
// strips of `strip` contiguous elements, `stride` elements apart. A block of a
// tensor split along a non-leading dimension is such a region, so algorithms
// read and write strided blocks in place instead of transposing. A region can
// also be a list of rows of a matrix (`rows`): MoE streams gather and scatter
// the rows they carry without staging copies.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace jaccl {

struct Region {
  char* base = nullptr;
  size_t elem_bytes = 0;
  size_t count = 0;
  size_t strip = 0;   // 0: one contiguous strip
  size_t stride = 0;
  size_t first = 0;   // logical offset of element 0 (a slice of a strided region)
  const int32_t* rows = nullptr;  // row mode: logical row r is matrix row rows[r]
  size_t row_elems = 0;           // row mode: elements per row

  static Region contiguous(const void* base, size_t elem_bytes, size_t count, size_t first = 0) {
    return Region{const_cast<char*>(static_cast<const char*>(base)) + first * elem_bytes,
                  elem_bytes, count, 0, 0, 0, nullptr, 0};
  }

  // Rows rows[0..n) of a matrix with `row_elems` elements per row, one after another.
  static Region row_list(const void* base, size_t elem_bytes, size_t row_elems,
                         const int32_t* rows, size_t n) {
    Region r;
    r.base = const_cast<char*>(static_cast<const char*>(base));
    r.elem_bytes = elem_bytes;
    r.count = n * row_elems;
    r.rows = rows;
    r.row_elems = row_elems;
    return r;
  }

  // Block q of n when a tensor of `count` elements is split along a dimension
  // with `outer` elements before it (outer = product of the leading sizes).
  static Region block(const void* base, size_t elem_bytes, size_t count, size_t outer, int n,
                      int q) {
    size_t strip = count / (outer * n);
    if (outer == 1) return contiguous(base, elem_bytes, strip, q * strip);
    return Region{const_cast<char*>(static_cast<const char*>(base)) + q * strip * elem_bytes,
                  elem_bytes, strip * outer, strip, strip * n, 0, nullptr, 0};
  }

  // Elements [begin, begin + n) of this region.
  Region slice(size_t begin, size_t n) const {
    Region r = *this;
    if (rows == nullptr && strip == 0) {
      r.base += begin * elem_bytes;
    } else {
      r.first += begin;
    }
    r.count = n;
    return r;
  }

  // Address of logical element i; *run gets the contiguous elements from there.
  char* at(size_t i, size_t* run) const {
    if (rows != nullptr) {
      size_t j = first + i, r = j / row_elems, within = j % row_elems;
      *run = std::min(row_elems - within, count - i);
      return base + (static_cast<size_t>(rows[r]) * row_elems + within) * elem_bytes;
    }
    if (strip == 0) {
      *run = count - i;
      return base + i * elem_bytes;
    }
    size_t j = first + i, s = j / strip, within = j % strip;
    *run = std::min(strip - within, count - i);
    return base + (s * stride + within) * elem_bytes;
  }
};

}  // namespace jaccl
