#include "loom/plan/plan_json.h"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <limits>
#include <map>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loom/core/both_cores.h"
#include "loom/core/json_error.h"
#include "loom/plan/recompute.h"
#include "loom/plan/residence.h"

namespace loom::plan {
namespace {

using nlohmann::json;

// JSON's quoted form of `text`, as nlohmann::json's dump() writes it: plain printable ASCII needs no escape
// and is quoted directly (plan.json names 120 k sub-ops at 64 devices), anything else goes through the library.
std::string quoted_json(std::string_view text) {
  const bool plain = std::ranges::all_of(text, [](char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; });
  if (!plain) return json(std::string(text)).dump();
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  out += text;
  out += '"';
  return out;
}

// j[key] without copying it, or `fallback` when absent (json::value would copy whole arrays).
const json& field(const json& j, const char* key, const json& fallback) {
  const auto it = j.find(key);
  return it == j.end() ? fallback : *it;
}
// The whole number j[key] as an int, or `fallback` when absent. A float, another type or a number beyond int is
// an error naming `where` and the key: json's value<int>() would convert 1e300 with undefined behaviour.
Expected<int> int_field(const json& j, const char* key, int fallback, std::string_view where) {
  const auto it = j.find(key);
  if (it == j.end()) return fallback;
  const bool fits = it->is_number_unsigned() ? it->get<std::uint64_t>() <= std::numeric_limits<int>::max()
                    : it->is_number_integer()
                        ? std::in_range<int>(it->get<std::int64_t>())
                        : false;
  if (!fits) return fail(fmt::format("{}: \"{}\" is {}, not a whole number of int size", where, key, it->dump()));
  return static_cast<int>(it->get<std::int64_t>());
}

const json kEmptyArray = json::array();
const json kEmptyObject = json::object();

// The graph's op and tensor names quoted once: every piece of every sub-op names its tensor.
struct QuotedNames {
  explicit QuotedNames(const ir::Graph& graph) {
    for (const ir::Op& op : graph.ops) ops.push_back(quoted_json(op.name));
    for (const ir::FullTensor& t : graph.tensors) tensors.push_back(quoted_json(t.name));
  }
  std::vector<std::string> ops, tensors;
};

// The writer's appends: integers by std::to_chars (fmt's format strings were most of plan.json's time).
void append(std::string& out, std::int64_t value) {
  char digits[24];
  out.append(digits, std::to_chars(digits, digits + sizeof digits, value).ptr);
}

void append_piece(std::string& out, const QuotedNames& names, const SubTensor& piece) {
  out += R"({"tensor": )";
  out += names.tensors[piece.tensor.index()];
  out += R"(, "box": [)";
  for (std::size_t d = 0; d < piece.box.size(); ++d) {
    const IndexRange& r = piece.box[d];
    out += d ? ", [" : "[";
    append(out, r.start);
    out += ", ";
    append(out, r.stop);
    if (r.step != 1) {
      out += ", ";
      append(out, r.step);
    }
    out += "]";
  }
  out += "]";
  if (!piece.value.is_whole()) {
    out += R"(, "value": [)";
    append(out, piece.value.index);
    out += ", ";
    append(out, piece.value.count);
    out += "]";
  }
  out += "}";
}

void append_pieces(std::string& out, const QuotedNames& names, const std::vector<SubTensor>& pieces) {
  out += "[";
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    out += i ? ", " : "";
    append_piece(out, names, pieces[i]);
  }
  out += "]";
}

// Appends the lines of the live sub-ops among plan.sub_ops[begin, end) to `out`, each after ",\n  ", the
// first after "\n  " where `first`. Room for the lines up to sub-op `room_until` is reserved by the first
// lines' length, so that the string grows once or twice rather than copying itself at every doubling.
void append_sub_op_lines(std::string& out, const Plan& plan, const QuotedNames& names,
                         const std::vector<int>& renumbered, std::size_t begin, std::size_t end, bool first,
                         std::size_t room_until) {
  constexpr std::size_t kSample = 256;
  const std::size_t start_size = out.size();
  for (std::size_t i = begin; i < end; ++i) {
    if (i == begin + kSample)
      out.reserve(out.size() + (out.size() - start_size) / kSample * (room_until - i) * 9 / 8);
    const SubOp& sub = plan.sub_ops[i];
    if (!sub.live) continue;
    out += first ? "\n  {\"id\": " : ",\n  {\"id\": ";
    first = false;
    append(out, renumbered[sub.id.index()]);
    out += R"(, "op": )";
    out += names.ops[sub.op.index()];
    out += R"(, "name": )";
    out += quoted_json(sub.name);
    out += R"(, "device": )";
    append(out, sub.device);
    if (sub.mirror.valid() && !plan.graph->op(sub.op).is_mirror() && plan.sub_op(sub.mirror).live) {
      out += R"(, "backward": )";
      append(out, renumbered[sub.mirror.index()]);
    }
    if (sub.weight_mirror.valid() && plan.sub_op(sub.weight_mirror).live) {
      out += R"(, "weight_backward": )";
      append(out, renumbered[sub.weight_mirror.index()]);
    }
    if (is_plain_recompute(plan, sub.id)) out += R"(, "recompute": true)";
    if (is_nested_recompute(plan, sub.id)) out += R"(, "recompute_nested": true)";
    out += R"(, "inputs": )";
    append_pieces(out, names, sub.inputs);
    out += R"(, "outputs": )";
    append_pieces(out, names, sub.outputs);
    out += "}";
  }
}

// Reads one JSON file's sub-ops back; `where` prefixes every error.
class Reader {
 public:
  Reader(const ir::Graph& graph, std::string_view source) : graph_(graph), source_(source) {
    for (const ir::Op& op : graph.ops) ops_.emplace(op.name, op.id);
    for (const ir::FullTensor& t : graph.tensors) tensors_.emplace(t.name, t.id);
  }

  Expected<Plan> read(const json& doc, Plan plan) {
    if (!doc.is_object() || doc.value("format", "") != "loom-plan")
      return fail(fmt::format("{}: not a Loom plan (no \"format\": \"loom-plan\")", source_),
                  "pass a plan.json written by `loom plan`");
    LOOM_ASSIGN_OR_RETURN(const int version, int_field(doc, "version", 0, source_));
    if (version != 1)
      return fail(fmt::format("{}: plan format version {} is not supported (this build reads 1)", source_, version));
    const json& g = field(doc, "graph", kEmptyObject);
    LOOM_ASSIGN_OR_RETURN(const int ops, int_field(g, "ops", -1, fmt::format("{}: graph", source_)));
    LOOM_ASSIGN_OR_RETURN(const int tensors, int_field(g, "tensors", -1, fmt::format("{}: graph", source_)));
    if (ops != static_cast<long>(graph_.ops.size()) || tensors != static_cast<long>(graph_.tensors.size()))
      return fail(fmt::format("{}: the plan was made for a graph of {} ops and {} tensors, this one has {} and {}", source_,
                              ops, tensors, graph_.ops.size(), graph_.tensors.size()),
                  "load it with the model and options it was planned for");
    const json& subs = field(doc, "sub_ops", kEmptyArray);
    plan.sub_ops.clear();
    for (auto& list : plan.parts) list.clear();
    std::vector<int> backward_of(subs.size(), -1);
    for (std::size_t i = 0; i < subs.size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(SubOp sub, sub_op(subs[i], i));
      for (const char* key : {"backward", "weight_backward"}) {
        LOOM_ASSIGN_OR_RETURN(const int backward, int_field(subs[i], key, -1, fmt::format("{}: sub-op {}", source_, i)));
        if (backward < 0) continue;
        if (static_cast<std::size_t>(backward) >= subs.size() || static_cast<std::size_t>(backward) == i)
          return fail(fmt::format("{}: sub-op {} names {} part {}, which is not another sub-op", source_, i, key, backward));
        backward_of[static_cast<std::size_t>(backward)] = static_cast<int>(i);
        (key == std::string_view("backward") ? sub.mirror : sub.weight_mirror) = SubOpId(static_cast<std::uint32_t>(backward));
      }
      plan.parts[sub.op.index()].push_back(sub.id);
      plan.sub_ops.push_back(std::move(sub));
    }
    for (std::size_t i = 0; i < subs.size(); ++i)
      if (backward_of[i] >= 0) plan.sub_ops[i].mirror = SubOpId(static_cast<std::uint32_t>(backward_of[i]));
    std::vector<SubOpId> recomputed, nested;
    for (std::size_t i = 0; i < subs.size(); ++i) {
      if (subs[i].value("recompute", false)) recomputed.push_back(SubOpId(static_cast<std::uint32_t>(i)));
      if (subs[i].value("recompute_nested", false)) nested.push_back(SubOpId(static_cast<std::uint32_t>(i)));
    }
    LOOM_RETURN_IF_ERROR(with_context(recompute(plan, recomputed), std::string(source_)));
    LOOM_RETURN_IF_ERROR(with_context(recompute(plan, nested, /*nested=*/true), std::string(source_)));
    for (const auto& [tensor, where] : field(doc, "residence", kEmptyObject).items()) {
      const auto t = tensors_.find(tensor);
      if (t == tensors_.end()) return fail(fmt::format("{}: residence names tensor '{}', which the graph lacks", source_, tensor));
      const std::string text = where.is_string() ? where.get<std::string>() : "";
      if (text != name(Residence::optimizer_shards))
        return fail(fmt::format("{}: residence of '{}' is '{}'; only \"{}\" is written", source_, tensor, text,
                                name(Residence::optimizer_shards)));
      LOOM_RETURN_IF_ERROR(with_context(set_residence(plan, t->second, Residence::optimizer_shards), std::string(source_)));
    }
    for (const json& edge : field(doc, "orders", kEmptyArray)) {
      if (!edge.is_array() || edge.size() != 2 || !edge[0].is_number_unsigned() || !edge[1].is_number_unsigned() ||
          edge[0].get<std::size_t>() >= subs.size() || edge[1].get<std::size_t>() >= subs.size())
        return fail(fmt::format("{}: order edge {} is not a pair of sub-op ids below {}", source_, edge.dump(), subs.size()));
      plan.orders.emplace_back(SubOpId(edge[0].get<std::uint32_t>()), SubOpId(edge[1].get<std::uint32_t>()));
    }
    return plan;
  }

 private:
  Expected<SubOp> sub_op(const json& j, std::size_t index) {
    const std::string where = fmt::format("{}: sub-op {}", source_, index);
    if (!j.is_object()) return fail(fmt::format("{} is not an object", where));
    LOOM_ASSIGN_OR_RETURN(const int id, int_field(j, "id", -1, where));
    if (id != static_cast<long>(index)) return fail(fmt::format("{} has id {}; ids must count up from 0", where, id));
    const auto op = ops_.find(j.value("op", ""));
    if (op == ops_.end()) return fail(fmt::format("{} names op '{}', which the graph lacks", where, j.value("op", "")));
    SubOp sub;
    sub.id = SubOpId(static_cast<std::uint32_t>(index));
    sub.op = op->second;
    sub.name = j.value("name", std::string(graph_.op(sub.op).name));
    LOOM_ASSIGN_OR_RETURN(sub.device, int_field(j, "device", kUnassigned, where));
    const ir::Op& graph_op = graph_.op(sub.op);
    LOOM_ASSIGN_OR_RETURN(sub.inputs, pieces(j, "inputs", graph_op.inputs, where));
    LOOM_ASSIGN_OR_RETURN(sub.outputs, pieces(j, "outputs", graph_op.outputs, where));
    return sub;
  }

  Expected<std::vector<SubTensor>> pieces(const json& j, const char* key, const std::vector<ir::TensorId>& expected,
                                          const std::string& where) {
    const json& list = field(j, key, kEmptyArray);
    if (!list.is_array() || list.size() != expected.size())
      return fail(fmt::format("{} has {} {}, its op has {}", where, list.is_array() ? list.size() : 0, key, expected.size()));
    std::vector<SubTensor> out;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string at = fmt::format("{}, {} {}", where, key, i);
      const json& p = list[i];
      if (!p.is_object()) return fail(fmt::format("{} is not an object", at));
      const auto t = tensors_.find(p.value("tensor", ""));
      if (t == tensors_.end() || t->second != expected[i])
        return fail(fmt::format("{} names tensor '{}', but the op's is '{}'", at, p.value("tensor", ""),
                                graph_.tensor(expected[i]).name));
      SubTensor piece;
      piece.tensor = t->second;
      const ir::Shape& shape = graph_.tensor(t->second).shape;
      const json& box = field(p, "box", kEmptyArray);
      if (!box.is_array() || box.size() != shape.rank())
        return fail(fmt::format("{}: box has {} ranges, tensor '{}' has rank {}", at, box.size(), t->first, shape.rank()));
      for (std::size_t d = 0; d < box.size(); ++d) {
        const json& r = box[d];
        const bool ok = r.is_array() && (r.size() == 2 || r.size() == 3) &&
                        std::all_of(r.begin(), r.end(), [](const json& x) { return x.is_number_integer(); });
        IndexRange range;
        if (ok) range = {r[0].get<std::int64_t>(), r[1].get<std::int64_t>(), r.size() == 3 ? r[2].get<std::int64_t>() : 1};
        if (!ok || range.start < 0 || range.stop > shape[d] || range.step < 1 || range.empty())
          return fail(fmt::format("{}: range {} of dimension {} is not [start, stop(, step)] inside 0:{}", at, r.dump(), d,
                                  shape[d]));
        piece.box.push_back(range);
      }
      if (p.contains("value")) {
        const json& v = p["value"];
        if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer() ||
            v[1].get<std::int64_t>() < 1 || v[0].get<std::int64_t>() < 0 || v[0].get<std::int64_t>() >= v[1].get<std::int64_t>())
          return fail(fmt::format("{}: value {} is not [k, n] with 0 <= k < n", at, v.dump()));
        piece.value = {v[0].get<std::int64_t>(), v[1].get<std::int64_t>()};
      }
      out.push_back(std::move(piece));
    }
    return out;
  }

  const ir::Graph& graph_;
  std::string_view source_;
  std::map<std::string, ir::OpId, std::less<>> ops_;
  std::map<std::string, ir::TensorId, std::less<>> tensors_;
};

}  // namespace

std::string plan_to_json(const Plan& plan) {
  std::vector<int> renumbered(plan.sub_ops.size(), -1);
  int next = 0;
  for (const SubOp& sub : plan.sub_ops)
    if (sub.live) renumbered[sub.id.index()] = next++;
  const QuotedNames names(*plan.graph);
  // The sub-ops' lines (most of the file: 58 MB for llama3-8b's ZeRO-1 slice on 64 devices) in two halves,
  // one per core, the second appended to the first (which has room for both): the serial loop's bytes.
  std::string out = fmt::format(R"({{"format": "loom-plan", "version": 1, "graph": {{"ops": {}, "tensors": {}}},)",
                                plan.graph->ops.size(), plan.graph->tensors.size());
  out += "\n \"sub_ops\": [";
  const std::size_t header = out.size();
  std::string second;
  const std::size_t middle = plan.sub_ops.size() / 2;
  for_each_on_both_cores(2, [&](std::size_t half) {
    if (half == 0) append_sub_op_lines(out, plan, names, renumbered, 0, middle, true, plan.sub_ops.size());
    else append_sub_op_lines(second, plan, names, renumbered, middle, plan.sub_ops.size(), false,
                                 plan.sub_ops.size());
  });
  // Without a line in the first half, the second's first line follows the bracket without a comma.
  out.append(second, out.size() == header && !second.empty() ? 1 : 0);
  out += "],\n \"orders\": [";
  bool first_edge = true;
  for (const auto& [a, b] : plan.orders) {
    if (renumbered[a.index()] < 0 || renumbered[b.index()] < 0) continue;  // edges of transformed sub-ops bind nothing
    fmt::format_to(std::back_inserter(out), "{}[{}, {}]", first_edge ? "" : ", ", renumbered[a.index()],
                   renumbered[b.index()]);
    first_edge = false;
  }
  out += "],\n \"residence\": {";
  bool first_residence = true;
  for (std::size_t t = 0; t < plan.residence.size(); ++t) {
    if (plan.residence[t] == Residence::consumers) continue;
    out += fmt::format("{}{}: {}", first_residence ? "" : ", ",
                       quoted_json(plan.graph->tensor(ir::TensorId(static_cast<std::uint32_t>(t))).name),
                       quoted_json(name(plan.residence[t])));
    first_residence = false;
  }
  out += "}}\n";
  return out;
}

Expected<Plan> plan_from_json(std::string_view text, const ir::Graph& graph, const ir::OpCatalog& catalog,
                              std::string_view source) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    return fail(fmt::format("{}: {}", source, describe_json_error(e.what())), "pass a plan.json written by `loom plan`");
  }
  LOOM_ASSIGN_OR_RETURN(Plan fresh, make_plan(graph, catalog));
  try {
    return Reader(graph, source).read(doc, std::move(fresh));
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    return fail(fmt::format("{}: {}", source, e.what()), "pass a plan.json written by `loom plan`");
  }
}

}  // namespace loom::plan
