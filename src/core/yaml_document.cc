#include "loom/core/yaml_document.h"

#include <string>
#include <vector>

#include <fmt/format.h>

#include "loom/core/yaml_comma_guard.h"

namespace loom {

Expected<YAML::Node> load_one_yaml_document(std::string_view text, std::string_view source, const YamlFileKind& kind) {
  // yaml-cpp 0.7 loops forever on a stray comma (core/yaml_comma_guard.h): refused before it sees the text.
  if (Expected<void> guard = check_no_stray_yaml_comma(text); !guard)
    return fail(fmt::format("{} '{}': malformed YAML at {}", kind.what, source, guard.error().message),
                guard.error().hint);
  try {
    const std::vector<YAML::Node> documents = YAML::LoadAll(std::string(text));
    if (documents.size() > 1)
      return fail(fmt::format("{} '{}' holds {} YAML documents (separated by '---'), not one", kind.what, source,
                              documents.size()),
                  fmt::format("a {} describes {}: keep one document, one file each", kind.what, kind.one));
    return documents.empty() ? YAML::Node() : documents.front();
  } catch (const YAML::Exception& e) {
    return fail(fmt::format("{} '{}': malformed YAML at line {}, column {}: {}", kind.what, source, e.mark.line + 1,
                            e.mark.column + 1, e.msg),
                fmt::format("a {} is YAML (or JSON); {}", kind.what, kind.schema));
  } catch (const std::exception& e) {
    return fail(fmt::format("{} '{}': cannot parse: {}", kind.what, source, e.what()), std::string(kind.schema));
  }
}

}  // namespace loom
