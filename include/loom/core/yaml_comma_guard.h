// A guard for yaml-cpp 0.7 (Debian 12's), which loops forever, allocating, on a ',' that opens a token outside
// any [ ] or { } (jbeder/yaml-cpp#1040, fixed in 0.8): ",", "{a: 1}\n,", "'a'\n, b", "&x ,". Every YAML reader
// (cluster, model and constraint files) runs its text through here before yaml-cpp sees it.
//
// Such a comma is never valid YAML; a comma inside a plain scalar on its line ("name: a, b"), inside quotes, a
// comment or a flow collection is left alone. The one valid form refused: a line of a multi-line plain scalar
// or a block scalar (| >) that opens with ','; quoting that text reads it.
#pragma once

#include <string_view>

#include "loom/core/error.h"

namespace loom {

// Errors: "line L, column C: a ',' outside [ ] or { }" with a hint to drop it or quote the text holding it.
Expected<void> check_no_stray_yaml_comma(std::string_view text);

}  // namespace loom
