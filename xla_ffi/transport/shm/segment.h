// A mapped block of memory shared with other processes of this host, or a
// private one when nobody else needs to see it.
//
// Contract: create() makes a new POSIX shared-memory object (O_EXCL, mode
// 0600, so only this user's processes of this job can map it), sized and
// zero-filled; open() maps an existing one and checks its size; anonymous()
// maps private zeroed memory. unlink() removes the name (mappings stay valid);
// the destructor unmaps, and unlinks if this object created the name and has
// not unlinked it yet, so an exception never leaves a name in /dev/shm.
#pragma once

#include <cstddef>
#include <string>

namespace jaccl {

class Segment {
 public:
  static Segment create(const std::string& name, size_t bytes);
  static Segment open(const std::string& name, size_t bytes);
  static Segment anonymous(size_t bytes);

  Segment() = default;
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  void unlink();
  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  void reset();

  void* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  bool owns_name_ = false;
};

}  // namespace jaccl
