#include "loom/frontend/graph_sizes.h"

#include <charconv>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loom/core/checked_math.h"

namespace loom::frontend {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kSection = "sizes";
constexpr int kVersion = 1;
constexpr std::string_view kForm = "a size is a whole number or \"batch\" / \"K*batch\" (loom.trace writes them)";

Expected<SizeExpr> read_size(const Json& j, const std::string& path) {
  if (j.is_number_integer()) return SizeExpr{j.get<std::int64_t>()};
  if (!j.is_string()) return fail(fmt::format("{}: expected a whole number or a batch term", path), std::string(kForm));
  const std::string text = j.get<std::string>();
  std::string_view rest = text;
  std::int64_t coefficient = 1;
  if (const std::size_t star = rest.find('*'); star != std::string_view::npos) {
    const std::string_view k = rest.substr(0, star);
    const auto [end, ec] = std::from_chars(k.data(), k.data() + k.size(), coefficient);
    if (ec != std::errc{} || end != k.data() + k.size() || coefficient < 1)
      return fail(fmt::format("{}: '{}' has no whole coefficient", path, text), std::string(kForm));
    rest = rest.substr(star + 1);
  }
  if (rest != "batch") return fail(fmt::format("{}: unknown size symbol in '{}'", path, text), std::string(kForm));
  return SizeExpr{BatchTerm{coefficient}};
}

Expected<std::vector<SizeExpr>> read_sizes(const Json& j, const std::string& path) {
  if (!j.is_array()) return fail(fmt::format("{}: expected a list of sizes", path), std::string(kForm));
  std::vector<SizeExpr> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(SizeExpr s, read_size(j[i], fmt::format("{}[{}]", path, i)));
    out.push_back(s);
  }
  return out;
}

Expected<std::size_t> read_index(const Json& entry, const char* key, const std::string& path) {
  const auto it = entry.find(key);
  if (it == entry.end() || !it->is_number_unsigned())
    return fail(fmt::format("{}.{}: expected a non-negative integer", path, key), "ids are the graph's tensor and op ids");
  return it->get<std::size_t>();
}

// The section's list `field` (empty when left out); anything but a list is an error (indexing a number or an
// object by position would throw).
Expected<Json> list_field(const Json& section, const char* field, const std::string& path) {
  const auto it = section.find(field);
  if (it == section.end()) return Json::array();
  if (!it->is_array()) return fail(fmt::format("{}.{}: expected a list, got {}", path, field, it->type_name()),
                                   "loom.trace writes \"tensors\" and \"attrs\" as lists of entries");
  return *it;
}

Expected<GraphSizes> read_section(const Json& section) {
  const std::string s(kSection);
  if (!section.is_object()) return fail(fmt::format("{}: expected an object", s), "fields: version, symbols, tensors, attrs");
  for (const auto& [key, value] : section.items())
    if (key != "version" && key != "symbols" && key != "tensors" && key != "attrs")
      return fail(fmt::format("{}: unknown field '{}'", s, key), "fields: version, symbols, tensors, attrs");
  if (!section.contains("version") || section["version"] != kVersion)
    return fail(fmt::format("{}.version: this engine reads version {}", s, kVersion), "trace the model again with this loom");
  GraphSizes sizes;
  const Json& symbols = section.value("symbols", Json::object());
  if (!symbols.is_object() || symbols.size() != 1 || !symbols.contains("batch") || !symbols["batch"].is_number_integer() ||
      symbols["batch"].get<std::int64_t>() < 1)
    return fail(fmt::format("{}.symbols: expected {{\"batch\": N}} with N >= 1", s), "the batch the graph was traced at");
  sizes.batch = symbols["batch"].get<std::int64_t>();
  LOOM_ASSIGN_OR_RETURN(const Json tensors, list_field(section, "tensors", s));
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string path = fmt::format("{}.tensors[{}]", s, i);
    LOOM_ASSIGN_OR_RETURN(const std::size_t id, read_index(tensors[i], "id", path));
    if (!tensors[i].contains("shape")) return fail(fmt::format("{}.shape: missing", path));
    LOOM_ASSIGN_OR_RETURN(std::vector<SizeExpr> shape, read_sizes(tensors[i]["shape"], path + ".shape"));
    sizes.tensors.push_back({id, std::move(shape)});
  }
  LOOM_ASSIGN_OR_RETURN(const Json attrs, list_field(section, "attrs", s));
  for (std::size_t i = 0; i < attrs.size(); ++i) {
    const std::string path = fmt::format("{}.attrs[{}]", s, i);
    LOOM_ASSIGN_OR_RETURN(const std::size_t op, read_index(attrs[i], "op", path));
    if (!attrs[i].contains("name") || !attrs[i]["name"].is_string() || !attrs[i].contains("value"))
      return fail(fmt::format("{}: expected name (a string) and value", path));
    const Json& value = attrs[i]["value"];
    GraphSizes::AttrSizes a{.op = op, .name = attrs[i]["name"].get<std::string>(), .value = {}, .list = value.is_array()};
    if (a.list) {
      LOOM_ASSIGN_OR_RETURN(a.value, read_sizes(value, path + ".value"));
    } else {
      LOOM_ASSIGN_OR_RETURN(SizeExpr one, read_size(value, path + ".value"));
      a.value.push_back(one);
    }
    sizes.attrs.push_back(std::move(a));
  }
  return sizes;
}

Expected<std::int64_t> evaluate(const SizeExpr& e, std::int64_t batch) {
  if (const auto* fixed = std::get_if<std::int64_t>(&e)) return *fixed;
  const auto size = checked_mul(std::get<BatchTerm>(e).coefficient, batch);
  if (!size) return fail(fmt::format("a size of {} x batch {} overflows", std::get<BatchTerm>(e).coefficient, batch));
  return *size;
}

// The sizes at `batch`, checked at the traced batch against what the graph holds (`label` names them).
Expected<std::vector<std::int64_t>> evaluate_all(const std::vector<SizeExpr>& record, const std::vector<std::int64_t>& held,
                                                 const GraphSizes& sizes, std::int64_t batch, const std::string& label) {
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < record.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(const std::int64_t traced, evaluate(record[i], sizes.batch));
    if (record.size() != held.size() || traced != held[i])
      return fail(fmt::format("the sizes section does not match {}: it records {} at batch {} where the graph holds {}",
                              label, traced, sizes.batch, i < held.size() ? fmt::format("{}", held[i]) : "nothing"),
                  "the section belongs to the graph it was traced with: trace the model again");
    LOOM_ASSIGN_OR_RETURN(const std::int64_t size, evaluate(record[i], batch));
    out.push_back(size);
  }
  return out;
}

}  // namespace

Expected<SplitSizes> split_sizes(std::string_view text) {
  SplitSizes split{.graph_json = std::string(text), .sizes = std::nullopt};
  if (text.find("\"sizes\"") == std::string_view::npos) return split;  // most files: no second parse
  Json root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object() || !root.contains(kSection)) return split;
  LOOM_ASSIGN_OR_RETURN(split.sizes, read_section(root[std::string(kSection)]));
  root.erase(std::string(kSection));
  split.graph_json = root.dump();
  return split;
}

Expected<void> resize_graph(ir::Graph& graph, const GraphSizes& sizes, std::int64_t batch) {
  for (const GraphSizes::TensorSizes& t : sizes.tensors) {
    if (t.id >= graph.tensors.size())
      return fail(fmt::format("the sizes section names tensor {}, and the graph has {}", t.id, graph.tensors.size()),
                  "the section belongs to the graph it was traced with: trace the model again");
    ir::FullTensor& tensor = graph.tensors[t.id];
    const std::string label = fmt::format("tensor '{}' ({})", tensor.name, tensor.shape.to_string());
    LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> shape, evaluate_all(t.shape, tensor.shape.dims, sizes, batch, label));
    if (!tensor.value.empty() && shape != tensor.shape.dims)
      return fail(fmt::format("{} holds constant elements, which a batch of {} would change", label, batch),
                  "plan it at the batch it was traced at, or trace it again at this batch");
    tensor.shape = ir::Shape(std::move(shape));
    if (!tensor.shape.within_limits())
      return fail(fmt::format("{} at batch {} is {}, past the engine's limits", label, batch, tensor.shape.to_string()),
                  "give a smaller --global-batch");
  }
  for (const GraphSizes::AttrSizes& a : sizes.attrs) {
    if (a.op >= graph.ops.size())
      return fail(fmt::format("the sizes section names op {}, and the graph has {}", a.op, graph.ops.size()),
                  "the section belongs to the graph it was traced with: trace the model again");
    ir::Op& op = graph.ops[a.op];
    const std::string label = fmt::format("op '{}' attribute '{}'", op.name, a.name);
    const auto it = op.attrs.find(a.name);
    if (it == op.attrs.end())
      return fail(fmt::format("the sizes section names {}, which the op does not have", label),
                  "the section belongs to the graph it was traced with: trace the model again");
    std::vector<std::int64_t> held;
    if (const auto* list = std::get_if<std::vector<std::int64_t>>(&it->second); list != nullptr && a.list) held = *list;
    if (const auto* one = std::get_if<std::int64_t>(&it->second); one != nullptr && !a.list) held = {*one};
    LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> value, evaluate_all(a.value, held, sizes, batch, label));
    if (a.list) it->second = std::move(value);
    else it->second = value.front();
  }
  return {};
}

}  // namespace loom::frontend
