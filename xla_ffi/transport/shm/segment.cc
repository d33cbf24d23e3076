#include "transport/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

#include "common/error.h"

namespace jaccl {

Segment Segment::create(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw_system_error("shm_open(create " + name + ")");
  Segment segment;
  segment.name_ = name;
  segment.owns_name_ = true;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    throw_system_error("ftruncate(" + name + ")");  // segment's destructor unlinks
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (data == MAP_FAILED) throw_system_error("mmap(" + name + ")");
  segment.data_ = data;
  segment.size_ = bytes;
  return segment;
}

Segment Segment::open(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) throw_system_error("shm_open(" + name + ")");
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    throw_error(ErrorKind::kMismatch, "shared-memory segment ", name, " has ",
                static_cast<long long>(st.st_size), " bytes, expected ", bytes,
                " (do all processes use the same JACCL_* settings?)");
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (data == MAP_FAILED) throw_system_error("mmap(" + name + ")");
  Segment segment;
  segment.name_ = name;
  segment.data_ = data;
  segment.size_ = bytes;
  return segment;
}

Segment Segment::anonymous(size_t bytes) {
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) throw_system_error("mmap(anonymous)");
  Segment segment;
  segment.data_ = data;
  segment.size_ = bytes;
  return segment;
}

Segment::Segment(Segment&& other) noexcept { *this = std::move(other); }

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    name_ = std::move(other.name_);
    owns_name_ = std::exchange(other.owns_name_, false);
  }
  return *this;
}

Segment::~Segment() { reset(); }

void Segment::unlink() {
  if (owns_name_) {
    shm_unlink(name_.c_str());
    owns_name_ = false;
  }
}

void Segment::reset() {
  unlink();
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace jaccl
