// The JSON form of a Graph. Layout (version 1):
//
//   {
//     "format": "loom-graph",
//     "version": 1,
//     "name": "...",
//     "inputs": [0], "parameters": [1, 2], "loss": 7,          (loss absent when the graph has none)
//     "tensors": [{"id", "name", "role", "dtype", "shape", "owner"?, "updates"?, "value"?, "derived"?}, ...],
//     "ops": [{"id", "name", "type", "pass", "mirror_of"?, "inputs", "outputs", "annotation"?, "attrs"}, ...]
//   }
//
// The writer puts one tensor or op per line, keys in the order above, so diffs stay readable and the
// output is byte-stable. Attribute values keep their kind: integers, booleans, strings and integer
// lists are plain JSON; a real is tagged {"real": 1.0} because many JSON writers cannot keep 1.0 apart
// from 1 (non-finite reals are {"real": "inf"}, {"real": "-inf"}, {"real": "nan"}). The reader also
// takes an untagged JSON number with a fraction or exponent (0.5, 1e-8) as a real. A buffer's "value" is
// its elements in row-major order, numbers or "inf" / "-inf" / "nan". A derived input's "derived" is
// {"from": labels input id, "kind": "counted_tokens", "ignore_index": -100, "trim"?: [[front, back], ...]}
// (ir/derived_input.h).
//
// The reader is strict: unknown fields, missing fields, wrong types and ids out of range are errors
// naming the JSON path; then ir::check_structure runs. nlohmann throws, so every call into it that can
// throw stays inside this file and its exceptions become Errors.
#include "loom/ir/graph_json.h"

#include <cmath>
#include <initializer_list>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loom/core/json_error.h"

namespace loom::ir {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

constexpr std::string_view kFormat = "loom-graph";
constexpr std::string_view kCountedTokens = "counted_tokens";  // the one DerivedInput kind

// ---------------------------------------------------------------------------------------------
// Writing

OrderedJson attr_to_json(const AttrValue& value) {
  struct Visitor {
    OrderedJson operator()(std::int64_t v) const { return v; }
    OrderedJson operator()(bool v) const { return v; }
    OrderedJson operator()(const std::string& v) const { return v; }
    OrderedJson operator()(const std::vector<std::int64_t>& v) const { return OrderedJson(v); }
    OrderedJson operator()(double v) const {
      OrderedJson tagged = OrderedJson::object();
      if (std::isnan(v)) tagged["real"] = "nan";
      else if (std::isinf(v)) tagged["real"] = v > 0 ? "inf" : "-inf";
      else tagged["real"] = v;
      return tagged;
    }
  };
  return std::visit(Visitor{}, value);
}

OrderedJson tensor_to_json(const FullTensor& t) {
  OrderedJson j = OrderedJson::object();
  j["id"] = t.id.value;
  j["name"] = t.name;
  j["role"] = name(t.role);
  j["dtype"] = name(t.dtype);
  j["shape"] = t.shape.dims;
  if (t.owner.valid()) j["owner"] = t.owner.value;
  if (t.updates.valid()) j["updates"] = t.updates.value;
  if (!t.value.empty()) {
    OrderedJson value = OrderedJson::array();
    for (double v : t.value) {
      if (std::isnan(v)) value.push_back("nan");
      else if (std::isinf(v)) value.push_back(v > 0 ? "inf" : "-inf");
      else value.push_back(v);
    }
    j["value"] = std::move(value);
  }
  if (t.derived) {
    OrderedJson derived = OrderedJson::object();
    derived["from"] = t.derived->from.value;
    derived["kind"] = kCountedTokens;
    derived["ignore_index"] = t.derived->ignore_index;
    if (!t.derived->trim.empty()) derived["trim"] = t.derived->trim;
    j["derived"] = std::move(derived);
  }
  return j;
}

template <class Id>
OrderedJson ids_to_json(const std::vector<Id>& ids) {
  OrderedJson list = OrderedJson::array();
  for (Id id : ids) list.push_back(id.value);
  return list;
}

OrderedJson op_to_json(const Op& op) {
  OrderedJson j = OrderedJson::object();
  j["id"] = op.id.value;
  j["name"] = op.name;
  j["type"] = op.type;
  j["pass"] = name(op.pass);
  if (op.mirror_of.valid()) j["mirror_of"] = op.mirror_of.value;
  j["inputs"] = ids_to_json(op.inputs);
  j["outputs"] = ids_to_json(op.outputs);
  j["annotation"] = op.annotation;
  OrderedJson attrs = OrderedJson::object();
  for (const auto& [key, value] : op.attrs) attrs[key] = attr_to_json(value);  // Attrs is sorted
  j["attrs"] = std::move(attrs);
  return j;
}

// Compact one-line form. Invalid UTF-8 in names is replaced rather than thrown on: writing never fails.
std::string dump(const OrderedJson& j) { return j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace); }

template <class Item, class ToJson>
void append_list(std::string& out, std::string_view key, const std::vector<Item>& items, ToJson to_json) {
  out += fmt::format("  \"{}\": [", key);
  for (std::size_t i = 0; i < items.size(); ++i) {
    out += i == 0 ? "\n    " : ",\n    ";
    out += dump(to_json(items[i]));
  }
  out += items.empty() ? "]" : "\n  ]";
}

// ---------------------------------------------------------------------------------------------
// Reading. Every helper takes the JSON path of the value it reads, for its error messages.

std::string child(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}
std::string child(std::string_view path, std::size_t index) { return fmt::format("{}[{}]", path, index); }
std::string where(std::string_view path) { return path.empty() ? std::string("top level") : std::string(path); }

std::string describe(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return fmt::format("the string {}", j.dump(-1, ' ', false, Json::error_handler_t::replace));
    case Json::value_t::boolean: return j.get<bool>() ? "true" : "false";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return fmt::format("the number {}", j.dump());
    case Json::value_t::binary:
    case Json::value_t::discarded: break;
  }
  return "an unsupported value";
}

std::unexpected<Error> type_error(std::string_view path, std::string_view expected, const Json& found) {
  return fail(fmt::format("{}: expected {}, got {}", where(path), expected, describe(found)));
}

Expected<void> expect_object(const Json& j, std::string_view path, std::initializer_list<std::string_view> known) {
  if (!j.is_object()) return type_error(path, "an object", j);
  for (const auto& [key, value] : j.items()) {
    bool found = false;
    for (std::string_view k : known) found = found || k == key;
    if (!found) {
      std::string list;
      for (std::string_view k : known) list += fmt::format("{}{}", list.empty() ? "" : ", ", k);
      return fail(fmt::format("{}: unknown field '{}'", where(path), key), fmt::format("the fields are: {}", list));
    }
  }
  return {};
}

// The member `key` of an object already checked by expect_object; nullptr when absent.
const Json* member(const Json& object, std::string_view key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

Expected<const Json*> required(const Json& object, std::string_view path, std::string_view key) {
  const Json* value = member(object, key);
  if (value == nullptr) return fail(fmt::format("{}: missing field '{}'", where(path), key));
  return value;
}

Expected<std::string> read_string(const Json& j, std::string_view path) {
  if (!j.is_string()) return type_error(path, "a string", j);
  return j.get<std::string>();
}

Expected<std::int64_t> read_int64(const Json& j, std::string_view path) {
  if (j.is_number_unsigned()) {
    const auto v = j.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return fail(fmt::format("{}: integer {} does not fit in 64 bits", where(path), v));
    return static_cast<std::int64_t>(v);
  }
  if (j.is_number_integer()) return j.get<std::int64_t>();
  return type_error(path, "an integer", j);
}

// An id into a list of `count` things; `what` names them ("tensor", "op").
template <class Id>
Expected<Id> read_id(const Json& j, std::string_view path, std::size_t count, std::string_view what) {
  if (!j.is_number_integer()) return type_error(path, fmt::format("a {} id (an integer)", what), j);
  const bool negative = !j.is_number_unsigned() && j.get<std::int64_t>() < 0;
  if (negative || j.get<std::uint64_t>() >= count)
    return fail(fmt::format("{}: {} id {} out of range (graph has {} {}s)", where(path), what, j.dump(), count, what));
  return Id(static_cast<std::uint32_t>(j.get<std::uint64_t>()));
}

template <class Id>
Expected<std::vector<Id>> read_ids(const Json& j, std::string_view path, std::size_t count, std::string_view what) {
  if (!j.is_array()) return type_error(path, fmt::format("an array of {} ids", what), j);
  std::vector<Id> ids;
  ids.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(Id id, read_id<Id>(j[i], child(path, i), count, what));
    ids.push_back(id);
  }
  return ids;
}

// The "id" field must equal the position in its list: ids are indices into flat vectors.
Expected<void> check_own_id(const Json& object, std::string_view path, std::size_t index) {
  LOOM_ASSIGN_OR_RETURN(const Json* id, required(object, path, "id"));
  const std::string id_path = child(path, "id");
  if (!id->is_number_integer()) return type_error(id_path, "an integer", *id);
  const bool negative = !id->is_number_unsigned() && id->get<std::int64_t>() < 0;
  if (!negative && id->get<std::uint64_t>() == index) return {};
  return fail(fmt::format("{}: is {}, but an id must equal its position in the list ({})", id_path, id->dump(), index));
}

Expected<Shape> read_shape(const Json& j, std::string_view path) {
  if (!j.is_array()) return type_error(path, "an array of sizes", j);
  Shape shape;
  std::int64_t numel = 1;
  for (std::size_t i = 0; i < j.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(std::int64_t size, read_int64(j[i], child(path, i)));
    if (size <= 0) return fail(fmt::format("{}: size {} must be positive", where(child(path, i)), size));
    // Later code multiplies sizes (element and byte counts): keep them far from overflow.
    if (__builtin_mul_overflow(numel, size, &numel) || numel > ir::kMaxElements)
      return fail(fmt::format("{}: the tensor has more than 2^48 elements, Loom's limit", where(path)));
    shape.dims.push_back(size);
  }
  return shape;
}

Expected<double> read_real(const Json& j, std::string_view path) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto& text = j.get_ref<const std::string&>();
    if (text == "inf") return std::numeric_limits<double>::infinity();
    if (text == "-inf") return -std::numeric_limits<double>::infinity();
    if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
  }
  return type_error(path, "a number, \"inf\", \"-inf\" or \"nan\"", j);
}

// A constant buffer's elements: one per element of its shape.
Expected<std::vector<double>> read_buffer_value(const Json& j, std::string_view path, const FullTensor& t) {
  if (t.role != TensorRole::buffer)
    return fail(fmt::format("{}: tensor '{}' has role {}; only buffers carry a constant value", where(path), t.name,
                            name(t.role)),
                "drop \"value\" or make the tensor a buffer");
  if (!j.is_array()) return type_error(path, "an array of numbers", j);
  if (static_cast<std::int64_t>(j.size()) != t.shape.numel())
    return fail(fmt::format("{}: {} values for tensor '{}' of {} elements", where(path), j.size(), t.name,
                            t.shape.numel()),
                "write one value per element, row-major");
  std::vector<double> values;
  values.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(double v, read_real(j[i], child(path, i)));
    values.push_back(v);
  }
  return values;
}

// A derived input's rule (ir/derived_input.h); check_derived_inputs checks it against the graph.
Expected<DerivedInput> read_derived(const Json& j, std::string_view path, std::size_t tensor_count) {
  LOOM_RETURN_IF_ERROR(expect_object(j, path, {"from", "kind", "ignore_index", "trim"}));
  DerivedInput d;
  LOOM_ASSIGN_OR_RETURN(const Json* from, required(j, path, "from"));
  LOOM_ASSIGN_OR_RETURN(d.from, read_id<TensorId>(*from, child(path, "from"), tensor_count, "tensor"));
  LOOM_ASSIGN_OR_RETURN(const Json* kind, required(j, path, "kind"));
  LOOM_ASSIGN_OR_RETURN(std::string kind_name, read_string(*kind, child(path, "kind")));
  if (kind_name != kCountedTokens)
    return fail(fmt::format("{}: kind '{}' is not a derived input kind", where(child(path, "kind")), kind_name),
                fmt::format("the one kind is '{}'", kCountedTokens));
  LOOM_ASSIGN_OR_RETURN(const Json* ignore, required(j, path, "ignore_index"));
  LOOM_ASSIGN_OR_RETURN(d.ignore_index, read_int64(*ignore, child(path, "ignore_index")));
  if (const Json* trim = member(j, "trim")) {
    const std::string trim_path = child(path, "trim");
    if (!trim->is_array()) return type_error(trim_path, "an array of [front, back] pairs", *trim);
    for (std::size_t k = 0; k < trim->size(); ++k) {
      const Json& pair = (*trim)[k];
      const std::string pair_path = child(trim_path, k);
      if (!pair.is_array() || pair.size() != 2) return type_error(pair_path, "a [front, back] pair", pair);
      LOOM_ASSIGN_OR_RETURN(std::int64_t front, read_int64(pair[0], child(pair_path, std::size_t{0})));
      LOOM_ASSIGN_OR_RETURN(std::int64_t back, read_int64(pair[1], child(pair_path, std::size_t{1})));
      d.trim.push_back({front, back});
    }
  }
  return d;
}

Expected<AttrValue> read_attr(const Json& j, std::string_view path) {
  switch (j.type()) {
    case Json::value_t::boolean: return AttrValue(j.get<bool>());
    case Json::value_t::string: return AttrValue(j.get<std::string>());
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: {
      LOOM_ASSIGN_OR_RETURN(std::int64_t v, read_int64(j, path));
      return AttrValue(v);
    }
    case Json::value_t::number_float: return AttrValue(j.get<double>());
    case Json::value_t::array: {
      std::vector<std::int64_t> list;
      for (std::size_t i = 0; i < j.size(); ++i) {
        LOOM_ASSIGN_OR_RETURN(std::int64_t v, read_int64(j[i], child(path, i)));
        list.push_back(v);
      }
      return AttrValue(std::move(list));
    }
    case Json::value_t::object: {
      LOOM_RETURN_IF_ERROR(expect_object(j, path, {"real"}));
      LOOM_ASSIGN_OR_RETURN(const Json* real, required(j, path, "real"));
      LOOM_ASSIGN_OR_RETURN(double v, read_real(*real, child(path, "real")));
      return AttrValue(v);
    }
    default: break;
  }
  return type_error(path, "an integer, a real ({\"real\": 0.5}), a boolean, a string or an integer list", j);
}

Expected<Attrs> read_attrs(const Json& j, std::string_view path) {
  if (!j.is_object()) return type_error(path, "an object", j);
  Attrs attrs;
  for (const auto& [key, value] : j.items()) {
    LOOM_ASSIGN_OR_RETURN(AttrValue attr, read_attr(value, child(path, key)));
    attrs.emplace(key, std::move(attr));
  }
  return attrs;
}

template <class Enum, class Parse>
Expected<Enum> read_enum(const Json& j, std::string_view path, Parse parse) {
  LOOM_ASSIGN_OR_RETURN(std::string text, read_string(j, path));
  Expected<Enum> value = parse(text);
  if (!value) {
    Error error = std::move(value).error();
    error.message = fmt::format("{}: {}", where(path), error.message);
    return std::unexpected(std::move(error));
  }
  return *value;
}

struct Counts {
  std::size_t tensors = 0;
  std::size_t ops = 0;
};

Expected<FullTensor> read_tensor(const Json& j, std::string_view path, std::size_t index, const Counts& counts) {
  LOOM_RETURN_IF_ERROR(
      expect_object(j, path, {"id", "name", "role", "dtype", "shape", "owner", "updates", "value", "derived"}));
  LOOM_RETURN_IF_ERROR(check_own_id(j, path, index));
  FullTensor t;
  t.id = TensorId(static_cast<std::uint32_t>(index));
  LOOM_ASSIGN_OR_RETURN(const Json* name, required(j, path, "name"));
  LOOM_ASSIGN_OR_RETURN(t.name, read_string(*name, child(path, "name")));
  LOOM_ASSIGN_OR_RETURN(const Json* role, required(j, path, "role"));
  LOOM_ASSIGN_OR_RETURN(t.role, read_enum<TensorRole>(*role, child(path, "role"), parse_tensor_role));
  LOOM_ASSIGN_OR_RETURN(const Json* dtype, required(j, path, "dtype"));
  LOOM_ASSIGN_OR_RETURN(t.dtype, read_enum<DType>(*dtype, child(path, "dtype"), parse_dtype));
  LOOM_ASSIGN_OR_RETURN(const Json* shape, required(j, path, "shape"));
  LOOM_ASSIGN_OR_RETURN(t.shape, read_shape(*shape, child(path, "shape")));
  if (const Json* owner = member(j, "owner")) {
    LOOM_ASSIGN_OR_RETURN(t.owner, read_id<TensorId>(*owner, child(path, "owner"), counts.tensors, "tensor"));
  }
  if (const Json* updates = member(j, "updates")) {
    LOOM_ASSIGN_OR_RETURN(t.updates, read_id<TensorId>(*updates, child(path, "updates"), counts.tensors, "tensor"));
  }
  if (const Json* value = member(j, "value")) {
    LOOM_ASSIGN_OR_RETURN(t.value, read_buffer_value(*value, child(path, "value"), t));
  }
  if (const Json* derived = member(j, "derived")) {
    LOOM_ASSIGN_OR_RETURN(t.derived, read_derived(*derived, child(path, "derived"), counts.tensors));
  }
  return t;
}

Expected<Op> read_op(const Json& j, std::string_view path, std::size_t index, const Counts& counts) {
  LOOM_RETURN_IF_ERROR(expect_object(
      j, path, {"id", "name", "type", "pass", "mirror_of", "inputs", "outputs", "annotation", "attrs"}));
  LOOM_RETURN_IF_ERROR(check_own_id(j, path, index));
  Op op;
  op.id = OpId(static_cast<std::uint32_t>(index));
  LOOM_ASSIGN_OR_RETURN(const Json* name, required(j, path, "name"));
  LOOM_ASSIGN_OR_RETURN(op.name, read_string(*name, child(path, "name")));
  LOOM_ASSIGN_OR_RETURN(const Json* type, required(j, path, "type"));
  LOOM_ASSIGN_OR_RETURN(op.type, read_string(*type, child(path, "type")));
  LOOM_ASSIGN_OR_RETURN(const Json* pass, required(j, path, "pass"));
  LOOM_ASSIGN_OR_RETURN(op.pass, read_enum<Pass>(*pass, child(path, "pass"), parse_pass));
  if (const Json* mirror = member(j, "mirror_of")) {
    LOOM_ASSIGN_OR_RETURN(op.mirror_of, read_id<OpId>(*mirror, child(path, "mirror_of"), counts.ops, "op"));
  }
  LOOM_ASSIGN_OR_RETURN(const Json* inputs, required(j, path, "inputs"));
  LOOM_ASSIGN_OR_RETURN(op.inputs, read_ids<TensorId>(*inputs, child(path, "inputs"), counts.tensors, "tensor"));
  LOOM_ASSIGN_OR_RETURN(const Json* outputs, required(j, path, "outputs"));
  LOOM_ASSIGN_OR_RETURN(op.outputs, read_ids<TensorId>(*outputs, child(path, "outputs"), counts.tensors, "tensor"));
  // Optional: a traced graph leaves it out and frontend::load_graph_file resolves it from the registry
  // (the tracer holds no planning knowledge). Absent reads as "".
  if (const Json* annotation = member(j, "annotation")) {
    LOOM_ASSIGN_OR_RETURN(op.annotation, read_string(*annotation, child(path, "annotation")));
  }
  LOOM_ASSIGN_OR_RETURN(const Json* attrs, required(j, path, "attrs"));
  LOOM_ASSIGN_OR_RETURN(op.attrs, read_attrs(*attrs, child(path, "attrs")));
  return op;
}

Expected<Graph> read_graph(const Json& root) {
  LOOM_RETURN_IF_ERROR(
      expect_object(root, "", {"format", "version", "name", "inputs", "parameters", "loss", "tensors", "ops"}));
  LOOM_ASSIGN_OR_RETURN(const Json* format, required(root, "", "format"));
  LOOM_ASSIGN_OR_RETURN(std::string format_name, read_string(*format, "format"));
  if (format_name != kFormat)
    return fail(fmt::format("format: is '{}', expected '{}'", format_name, kFormat),
                "this reader takes the engine's graph JSON (e.g. as written by `loom graph --json`)");
  LOOM_ASSIGN_OR_RETURN(const Json* version_json, required(root, "", "version"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t version, read_int64(*version_json, "version"));
  if (version != kGraphJsonVersion)
    return fail(fmt::format("version: graph format version {} is not supported (this build reads version {})", version,
                            kGraphJsonVersion),
                "write the graph again with this build of loom");

  LOOM_ASSIGN_OR_RETURN(const Json* tensors, required(root, "", "tensors"));
  if (!tensors->is_array()) return type_error("tensors", "an array", *tensors);
  LOOM_ASSIGN_OR_RETURN(const Json* ops, required(root, "", "ops"));
  if (!ops->is_array()) return type_error("ops", "an array", *ops);
  const Counts counts{tensors->size(), ops->size()};
  if (counts.tensors >= TensorId::kInvalid || counts.ops >= OpId::kInvalid)
    return fail("the graph has more tensors or ops than ids can number");

  Graph graph;
  LOOM_ASSIGN_OR_RETURN(const Json* name, required(root, "", "name"));
  LOOM_ASSIGN_OR_RETURN(graph.name, read_string(*name, "name"));
  graph.tensors.reserve(counts.tensors);
  for (std::size_t i = 0; i < counts.tensors; ++i) {
    LOOM_ASSIGN_OR_RETURN(FullTensor t, read_tensor((*tensors)[i], child("tensors", i), i, counts));
    graph.tensors.push_back(std::move(t));
  }
  graph.ops.reserve(counts.ops);
  for (std::size_t i = 0; i < counts.ops; ++i) {
    LOOM_ASSIGN_OR_RETURN(Op op, read_op((*ops)[i], child("ops", i), i, counts));
    graph.ops.push_back(std::move(op));
  }
  LOOM_ASSIGN_OR_RETURN(const Json* inputs, required(root, "", "inputs"));
  LOOM_ASSIGN_OR_RETURN(graph.inputs, read_ids<TensorId>(*inputs, "inputs", counts.tensors, "tensor"));
  LOOM_ASSIGN_OR_RETURN(const Json* parameters, required(root, "", "parameters"));
  LOOM_ASSIGN_OR_RETURN(graph.parameters, read_ids<TensorId>(*parameters, "parameters", counts.tensors, "tensor"));
  if (const Json* loss = member(root, "loss")) {
    LOOM_ASSIGN_OR_RETURN(graph.loss, read_id<TensorId>(*loss, "loss", counts.tensors, "tensor"));
  }
  return graph;
}

}  // namespace

std::string graph_to_json(const Graph& graph) {
  std::string out = "{\n";
  out += fmt::format("  \"format\": \"{}\",\n", kFormat);
  out += fmt::format("  \"version\": {},\n", kGraphJsonVersion);
  out += fmt::format("  \"name\": {},\n", dump(OrderedJson(graph.name)));
  out += fmt::format("  \"inputs\": {},\n", dump(ids_to_json(graph.inputs)));
  out += fmt::format("  \"parameters\": {},\n", dump(ids_to_json(graph.parameters)));
  if (graph.loss.valid()) out += fmt::format("  \"loss\": {},\n", graph.loss.value);
  append_list(out, "tensors", graph.tensors, tensor_to_json);
  out += ",\n";
  append_list(out, "ops", graph.ops, op_to_json);
  out += "\n}\n";
  return out;
}

Expected<Graph> graph_from_json(std::string_view text) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::exception& e) {
    return fail(describe_json_error(e.what()), "the graph file must be a single JSON document");
  }
  // The accessors used by read_graph check types before every get<>(), so they should not throw;
  // the catch keeps that promise even if one is missed.
  try {
    LOOM_ASSIGN_OR_RETURN(Graph graph, read_graph(root));
    LOOM_RETURN_IF_ERROR(check_structure(graph));
    return graph;
  } catch (const std::exception& e) {
    return fail(fmt::format("graph JSON could not be read: {}", e.what()));
  }
}

}  // namespace loom::ir
