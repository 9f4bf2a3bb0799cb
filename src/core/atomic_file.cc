#include "loom/core/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

namespace loom {

Expected<void> write_file_atomically(const std::string& path, std::string_view text, std::string_view what) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path directory = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(directory, ec))
    return fail(fmt::format("{}: cannot write {}: directory '{}' does not exist", path, what, directory.string()),
                "create the directory first");
  if (fs::is_directory(target, ec)) return fail(fmt::format("{}: cannot write {}: it is a directory", path, what));
  const std::string temporary = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out)
      return fail(fmt::format("{}: cannot create '{}' ({})", path, temporary, std::strerror(errno)),
                  "check that the directory is writable");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();  // explicitly, so that a failed final flush is seen
    if (!out) {
      std::remove(temporary.c_str());
      return fail(fmt::format("{}: writing '{}' failed (disk full?)", path, temporary));
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int saved_errno = errno;
    std::remove(temporary.c_str());
    return fail(fmt::format("{}: cannot move '{}' into place ({})", path, temporary, std::strerror(saved_errno)));
  }
  return {};
}

}  // namespace loom
