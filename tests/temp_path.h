// A path in the temporary directory that no other process writes: the stem plus this process's id.
// Tests that write a fixed name there raced with other test processes writing the same name (another
// build's ctest, a ctest -j2 neighbour) and read half-written files now and then.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace loom::testing {

inline std::filesystem::path process_temp_path(const std::string& stem, const std::string& extension) {
  return std::filesystem::temp_directory_path() / (stem + "." + std::to_string(::getpid()) + extension);
}

}  // namespace loom::testing
