// One YAML document from a user's file (a cluster, model or constraints file): a file holding several
// documents (`---`) is refused rather than read up to its first, a stray comma that hangs yaml-cpp 0.7 is
// refused before it parses (yaml_comma_guard.h), and yaml-cpp's exceptions become errors naming the file, the
// line and the column.
#pragma once

#include <string_view>

#include <yaml-cpp/yaml.h>

#include "loom/core/error.h"

namespace loom {

struct YamlFileKind {
  std::string_view what;    // "cluster file": starts every message
  std::string_view one;     // "one cluster": what one file describes
  std::string_view schema;  // where the format is described, ending the syntax hint
};

// The file's one document (a null node for an empty file).
Expected<YAML::Node> load_one_yaml_document(std::string_view text, std::string_view source, const YamlFileKind& kind);

}  // namespace loom
