// Reading a whole input file (a graph, a model file) into memory, with errors that name it.
#pragma once

#include <string>
#include <string_view>

#include "loom/core/error.h"

namespace loom::frontend {

// The file's bytes. `what` names the kind of file in errors ("graph file"), `hint` says where to get one.
Expected<std::string> read_text_file(const std::string& path, std::string_view what, std::string_view hint);

}  // namespace loom::frontend
