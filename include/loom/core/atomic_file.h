// Writing a file so readers never see half of it: the text goes to a temporary file beside the target
// (so the rename stays on one file system), which is then renamed into place.
#pragma once

#include <string>
#include <string_view>

#include "loom/core/error.h"

namespace loom {

// `what` names the content in errors ("the graph", "the profile database"). Errors: a missing
// directory, a directory at `path`, an unwritable directory, a failed write (disk full), a failed
// rename; the temporary file is removed on every error.
Expected<void> write_file_atomically(const std::string& path, std::string_view text, std::string_view what);

}  // namespace loom
