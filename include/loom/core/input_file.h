// Reading a whole input file (a graph, a model, a cluster, a profile database, timer results, a solver
// instance) into memory, after checking that it is one: every file input of Loom goes through here.
// A FIFO would block forever and /dev/zero never ends, so only a regular file is read, and at most
// `max_bytes` of it (checked again while reading, for a file that grows).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "loom/core/error.h"

namespace loom {

// 256 MiB: far above the largest traced graph or profile database, far below what would exhaust memory.
inline constexpr std::uintmax_t kMaxInputBytes = std::uintmax_t{256} << 20;

// The file's bytes. `what` names the kind of file in errors ("graph file"), `hint` says how to get a good
// one. Errors ("PATH: cannot read the WHAT: REASON"): no such file, no permission, a directory, a FIFO, a
// device or socket, more than `max_bytes`, a failed read.
Expected<std::string> read_input_file(const std::string& path, std::string_view what, std::string_view hint,
                                      std::uintmax_t max_bytes = kMaxInputBytes);

}  // namespace loom
