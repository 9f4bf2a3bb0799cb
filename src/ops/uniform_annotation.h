// Annotations for ops whose every tensor has the same shape (gradient sums, optimizer updates):
// one explicit identifier per dimension ("d0 d1"), so each dimension can be split independently
// (ZeRO splits optimizer ops this way) and the annotation itself checks the shapes agree.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "loom/core/strings.h"

namespace loom::ops {

// uniform_annotation(2, 1, 2) == "d0 d1, d0 d1 -> d0 d1"; rank 0 gives scalars: ",  -> ".
inline std::string uniform_annotation(std::size_t inputs, std::size_t outputs, std::size_t rank) {
  std::vector<std::string> dims;
  for (std::size_t d = 0; d < rank; ++d) dims.push_back("d" + std::to_string(d));
  const std::string tensor = join(dims, " ");
  return join(std::vector<std::string>(inputs, tensor), ", ") + " -> " +
         join(std::vector<std::string>(outputs, tensor), ", ");
}

}  // namespace loom::ops
