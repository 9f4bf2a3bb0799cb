// Model files (docs/models.md). Reading never throws: yaml-cpp's exceptions end at this file, and every
// value is read from its scalar text by models::set_field, as the --arch flags are.
#include "loom/frontend/model_file.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <exception>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "loom/core/input_file.h"
#include "loom/core/strings.h"
#include "loom/core/suggest.h"
#include "loom/core/yaml_document.h"
#include "loom/models/families.h"

namespace loom::frontend {
namespace {

using models::ModelSpec;
using models::SpecField;

constexpr std::string_view kTextKeys[] = {"family", "name", "source"};
constexpr std::string_view kNominal = "nominal_params";
constexpr std::string_view kSchemaHint =
    "see docs/models.md; `loom models --write-files DIR` writes every preset as a model file to start from";

std::vector<std::string> known_keys() {
  std::vector<std::string> keys(std::begin(kTextKeys), std::end(kTextKeys));
  keys.emplace_back(kNominal);
  for (const SpecField field : models::spec_fields()) keys.emplace_back(models::key(field));
  return keys;
}

Expected<void> set_text(ModelSpec& spec, std::string_view key, std::string_view text) {
  if (trim(text).empty()) return fail("is empty", "give it a value, or leave the key out");
  std::string& target = key == "family" ? spec.family : key == "name" ? spec.name : spec.source;
  target = std::string(trim(text));
  return {};
}

Expected<void> set_nominal(ModelSpec& spec, std::string_view text) {
  std::string_view t = trim(text);
  double value = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (t.empty() || ec != std::errc{} || end != t.data() + t.size() || !std::isfinite(value) || value < 0)
    return fail(fmt::format("'{}' is not a parameter count", text), "give a number such as 1.3e9, or leave it out");
  spec.nominal_params = value;
  return {};
}

// One `key: value` line of the top-level mapping.
Expected<void> read_entry(ModelSpec& spec, const std::string& key, const YAML::Node& value) {
  if (!value.IsScalar())
    return fail(value.IsNull() ? "has no value" : "is not a single value", "write it as `key: value`");
  const std::string& text = value.Scalar();
  if (std::ranges::find(kTextKeys, key) != std::end(kTextKeys)) return set_text(spec, key, text);
  if (key == kNominal) return set_nominal(spec, text);
  return models::set_field(spec, *models::find_spec_field(key), text);
}

Expected<ModelSpec> read_spec(const YAML::Node& root, std::string_view source) {
  const std::string file = fmt::format("model file '{}'", source);
  if (!root.IsDefined() || root.IsNull()) return fail(fmt::format("{} is empty", file), std::string(kSchemaHint));
  if (!root.IsMap())
    return fail(fmt::format("{}: the top level is not a mapping of fields", file),
                fmt::format("write `family: gpt` and the family's fields, one `key: value` a line; {}", kSchemaHint));
  const std::vector<std::string> known = known_keys();
  std::set<std::string> seen;
  ModelSpec spec;
  for (const auto& item : root) {
    const std::string key = item.first.IsScalar() ? item.first.Scalar() : std::string("<non-scalar key>");
    if (std::ranges::find(known, key) == known.end()) {
      const std::string guess = did_you_mean(key, known);
      return fail(fmt::format("{}: unknown field '{}'", file, key),
                  fmt::format("{}the fields are {}; {}", guess.empty() ? "" : guess + "; ", join(known, ", "),
                              kSchemaHint));
    }
    if (!seen.insert(key).second)
      return fail(fmt::format("{}: field '{}' is given twice", file, key), "keep one of them");
    if (auto read = read_entry(spec, key, item.second); !read)
      return fail(fmt::format("{}: field '{}' {}", file, key, read.error().message), read.error().hint);
  }
  if (spec.family.empty())
    return fail(fmt::format("{}: field 'family' is missing", file),
                fmt::format("add `family: NAME` ({}); {}", join(models::family_names(), ", "), kSchemaHint));
  return spec;
}

}  // namespace

Expected<ModelSpec> parse_model_yaml(std::string_view text, std::string_view source) {
  LOOM_ASSIGN_OR_RETURN(const YAML::Node root,
                        load_one_yaml_document(text, source, {.what = "model file", .one = "one model",
                                                              .schema = kSchemaHint}));
  try {
    return read_spec(root, source);
  } catch (const std::exception& e) {  // yaml-cpp may throw on odd node shapes; never let it escape
    return fail(fmt::format("model file '{}': cannot read: {}", source, e.what()), std::string(kSchemaHint));
  }
}

Expected<models::ModelPreset> load_model_file(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(const std::string text,
                        read_input_file(path, "model file",
                                       "check the path; `loom models --write-files DIR` writes the presets' files"));
  LOOM_ASSIGN_OR_RETURN(const ModelSpec spec, parse_model_yaml(text, path));
  return with_context(models::preset_of(spec, models::FieldNaming::file_key), fmt::format("model file '{}'", path));
}

std::string model_to_yaml(const ModelSpec& spec) {
  std::string out = "# Loom model file (docs/models.md)\n";
  // A known family plainly, as the preset files have it; any other text quoted, so it reads back as written.
  const std::vector<std::string> families = models::family_names();
  const bool known = std::find(families.begin(), families.end(), spec.family) != families.end();
  out += fmt::format("family: {}\n", known ? spec.family : quoted(spec.family));
  if (!spec.name.empty()) out += fmt::format("name: {}\n", quoted(spec.name));
  if (!spec.source.empty()) out += fmt::format("source: {}\n", quoted(spec.source));
  // fmt's "{}" writes the shortest text that reads back to the same double.
  if (spec.nominal_params > 0) out += fmt::format("nominal_params: {}\n", spec.nominal_params);
  for (const SpecField field : models::spec_fields())
    if (models::given(spec, field)) out += fmt::format("{}: {}\n", models::key(field), models::value_text(spec, field));
  return out;
}

}  // namespace loom::frontend
