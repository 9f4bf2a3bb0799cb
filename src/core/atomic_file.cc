#include "loom/core/atomic_file.h"

#include <filesystem>

#include "loom/core/output_set.h"

namespace loom {

Expected<void> write_file_atomically(const std::string& path, std::string_view text, std::string_view what) {
  const std::filesystem::path target(path);
  const std::string directory = target.has_parent_path() ? target.parent_path().string() : ".";
  std::error_code ec;
  if (!std::filesystem::is_directory(directory, ec))
    return fail(fmt::format("{}: cannot write {}: directory '{}' does not exist", path, what, directory),
                "create the directory first");
  OutputSet set;
  set.add(directory, target.filename().string(), std::string(text), std::string(what));
  LOOM_RETURN_IF_ERROR(set.commit());
  return {};
}

}  // namespace loom
