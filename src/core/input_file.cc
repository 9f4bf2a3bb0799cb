#include "loom/core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "loom/core/strings.h"
#include "posix_file.h"

namespace loom {
using posix::Descriptor;
using posix::kind_of;

Expected<std::string> read_input_file(const std::string& path, std::string_view what, std::string_view hint,
                                      std::uintmax_t max_bytes) {
  const auto cannot = [&](std::string_view reason, std::string fix) {
    return fail(fmt::format("{}: cannot read the {}: {}", path, what, reason), std::move(fix));
  };
  // O_NONBLOCK: opening a FIFO with no writer would otherwise wait for one before fstat could refuse it.
  Descriptor file{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (file.fd < 0) {
    const int error = errno;
    if (error == ENOENT) return cannot("no such file", std::string(hint));
    return cannot(std::strerror(error), std::string(hint));
  }
  struct stat status{};
  if (::fstat(file.fd, &status) != 0) return cannot(std::strerror(errno), std::string(hint));
  if (!S_ISREG(status.st_mode))
    return cannot(fmt::format("it is {}, not a regular file", kind_of(status.st_mode)),
                  fmt::format("inputs are read from regular files only (save a stream to a file first); {}", hint));
  const auto too_large = [&](std::uintmax_t bytes) {
    return cannot(fmt::format("it is {} ({} bytes), more than the {} a {} may have", human_bytes(static_cast<double>(bytes)),
                              bytes, human_bytes(static_cast<double>(max_bytes)), what),
                  fmt::format("check the path; {}", hint));
  };
  if (static_cast<std::uintmax_t>(status.st_size) > max_bytes) return too_large(static_cast<std::uintmax_t>(status.st_size));
  std::string text;
  text.reserve(static_cast<std::size_t>(status.st_size));
  char buffer[1 << 16];
  while (true) {
    const ssize_t got = ::read(file.fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return cannot(std::strerror(errno), std::string(hint));
    if (got == 0) break;
    text.append(buffer, static_cast<std::size_t>(got));
    if (text.size() > max_bytes) return too_large(text.size());
  }
  return text;
}

}  // namespace loom
