// Writing one file so readers never see half of it: a set of one file (output_set.h), staged beside the
// target and renamed into place, under the directory's lock.
#pragma once

#include <string>
#include <string_view>

#include "loom/core/error.h"

namespace loom {

// `what` names the content in errors ("the graph", "the profile database"). Errors: a missing
// directory, a target that is not a regular file (a directory, a symlink, a FIFO, a device), an unwritable
// directory, a failed write (disk full, a file-size limit), a failed rename; nothing is left behind on error.
Expected<void> write_file_atomically(const std::string& path, std::string_view text, std::string_view what);

}  // namespace loom
