#include "loom/frontend/custom_op_section.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace loom::frontend {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kSection = "custom_ops";
constexpr std::string_view kFields = "type, annotation, flops_per_element (optional), differentiable (optional)";

Expected<ops::CustomOpSpec> read_spec(const Json& entry, const std::string& path) {
  if (!entry.is_object()) return fail(fmt::format("{}: expected an object", path), fmt::format("the fields are: {}", kFields));
  for (const auto& [key, value] : entry.items())
    if (key != "type" && key != "annotation" && key != "flops_per_element" && key != "differentiable")
      return fail(fmt::format("{}: unknown field '{}'", path, key), fmt::format("the fields are: {}", kFields));
  ops::CustomOpSpec spec;
  for (const char* key : {"type", "annotation"}) {
    auto it = entry.find(key);
    if (it == entry.end() || !it->is_string())
      return fail(fmt::format("{}.{}: {}", path, key, it == entry.end() ? "missing" : "not a string"),
                  fmt::format("every custom op gives {}", kFields));
    (std::string_view(key) == "type" ? spec.type : spec.annotation) = it->get<std::string>();
  }
  if (auto it = entry.find("flops_per_element"); it != entry.end()) {
    if (!it->is_number())
      return fail(fmt::format("{}.flops_per_element: not a number", path), "give the forward FLOPs per output element");
    spec.flops_per_element = it->get<double>();
  }
  if (auto it = entry.find("differentiable"); it != entry.end()) {
    if (!it->is_boolean()) return fail(fmt::format("{}.differentiable: not true or false", path));
    spec.differentiable = it->get<bool>();
  }
  return spec;
}

}  // namespace

Expected<SplitGraphText> split_custom_ops(std::string_view text) {
  SplitGraphText split{.graph_json = std::string(text), .custom_ops = {}};
  if (text.find("\"custom_ops\"") == std::string_view::npos) return split;  // most files: no second parse
  Json root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object() || !root.contains(kSection)) return split;
  const Json& section = root[std::string(kSection)];
  if (!section.is_array())
    return fail(fmt::format("{}: expected an array of op definitions", kSection), fmt::format("each gives {}", kFields));
  for (std::size_t i = 0; i < section.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(ops::CustomOpSpec spec, read_spec(section[i], fmt::format("{}[{}]", kSection, i)));
    split.custom_ops.push_back(std::move(spec));
  }
  root.erase(std::string(kSection));
  split.graph_json = root.dump();
  return split;
}

}  // namespace loom::frontend
