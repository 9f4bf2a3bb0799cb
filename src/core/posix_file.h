// What the readers (input_file.cc) and writers (output_set.cc) share about POSIX files.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <string_view>
#include <utility>

namespace loom::posix {

// An open file descriptor, closed when it goes out of scope (for a directory: its flock released).
struct Descriptor {
  int fd = -1;
  Descriptor() = default;
  explicit Descriptor(int f) : fd(f) {}
  Descriptor(Descriptor&& other) noexcept : fd(std::exchange(other.fd, -1)) {}
  Descriptor& operator=(Descriptor&& other) noexcept {
    std::swap(fd, other.fd);
    return *this;
  }
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// What a file that is not a regular file is, in words: "a FIFO (named pipe)", "a character device", ...
inline std::string_view kind_of(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace loom::posix
