// Reading constraint files (docs/constraints.md). Reading never throws: yaml-cpp's exceptions end at this
// file, numbers are parsed from the scalar text (std::from_chars), and every key is checked against the
// keys its mapping takes, duplicates included (yaml-cpp keeps both).
#include <charconv>
#include <exception>
#include <set>
#include <span>

#include <yaml-cpp/yaml.h>

#include "loom/core/input_file.h"
#include "loom/core/strings.h"
#include "loom/core/yaml_document.h"
#include "loom/search/plan_constraints.h"

namespace loom::search {
namespace {

constexpr std::string_view kDoc = "see docs/constraints.md";
constexpr std::string_view kTopKeys[] = {"partition", "replicate", "placement", "schedule", "degrees"};
constexpr std::string_view kPartitionKeys[] = {"ops", "types", "dims", "degrees"};
constexpr std::string_view kReplicateKeys[] = {"ops", "types"};
constexpr std::string_view kScheduleKeys[] = {"kinds", "micro_batches", "micro_batch_size"};
constexpr std::string_view kDegreeKeys[] = {"dp",      "tp",      "pp",      "zero",
                                            "recompute", "offload", "overlap", "sequence_parallel"};
constexpr std::uintmax_t kMaxFileBytes = std::uintmax_t{1} << 20;

std::string known(std::span<const std::string_view> keys) { return join(std::vector<std::string>(keys.begin(), keys.end()), ", "); }

int line_of(const YAML::Node& node) { return node.Mark().line < 0 ? 0 : node.Mark().line + 1; }

class Reader {
 public:
  explicit Reader(std::string_view source) : source_(source) {}

  std::unexpected<Error> error(const EntryName& entry, std::string_view what, std::string hint) const {
    return fail(fmt::format("constraints file '{}': entry {} {}", source_, to_string(entry), what),
                fmt::format("{}; {}", hint, kDoc));
  }

  // The pairs of a mapping, each key known and given once.
  Expected<std::vector<std::pair<EntryName, YAML::Node>>> entries(const YAML::Node& map, const EntryName& at,
                                                                   std::span<const std::string_view> keys) const {
    if (!map.IsMap()) return error(at, "is not a mapping", fmt::format("write it as keys: {}", keys.empty() ? "patterns" : known(keys)));
    std::vector<std::pair<EntryName, YAML::Node>> out;
    std::set<std::string> seen;
    for (const auto& item : map) {
      const std::string key = item.first.IsScalar() ? item.first.Scalar() : "<non-scalar key>";
      const EntryName entry{at.path.empty() ? key : fmt::format("{}.{}", at.path, key), line_of(item.first)};
      if (!keys.empty() && std::ranges::find(keys, key) == keys.end())
        return error(entry, "is an unknown key", fmt::format("the keys of '{}' are {}", at.path.empty() ? "the file" : at.path, known(keys)));
      if (!seen.insert(key).second) return error(entry, "is given twice", "keep one of the two");
      out.emplace_back(entry, item.second);
    }
    return out;
  }

  // A scalar or a list of scalars, as texts.
  Expected<std::vector<std::string>> texts(const YAML::Node& node, const EntryName& entry) const {
    std::vector<std::string> out;
    if (node.IsScalar()) {
      out.push_back(node.Scalar());
    } else if (node.IsSequence()) {
      for (const YAML::Node& item : node) {
        if (!item.IsScalar()) return error(entry, "holds a value that is not a scalar", "list plain values: [2, 4]");
        out.push_back(item.Scalar());
      }
    } else {
      return error(entry, "has no value", "give a value or a list of values: [2, 4]");
    }
    if (out.empty()) return error(entry, "is an empty list", "list at least one value, or leave the key out");
    return out;
  }

  template <class Int>
  Expected<std::vector<Int>> whole_numbers(const YAML::Node& node, const EntryName& entry, Int least) const {
    LOOM_ASSIGN_OR_RETURN(const std::vector<std::string> items, texts(node, entry));
    std::vector<Int> out;
    for (const std::string& text : items) {
      Int value{};
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (ec != std::errc() || end != text.data() + text.size() || value < least)
        return error(entry, fmt::format("has '{}', not a whole number of at least {}", text, least),
                     fmt::format("write whole numbers >= {}: [2, 4]", least));
      out.push_back(value);
    }
    return out;
  }

  // Names each checked by `parse` (an Expected of anything), stored as the canonical `name`.
  template <class Parse, class Name>
  Expected<std::vector<std::string>> names(const YAML::Node& node, const EntryName& entry, Parse parse, Name name) const {
    LOOM_ASSIGN_OR_RETURN(const std::vector<std::string> items, texts(node, entry));
    std::vector<std::string> out;
    for (const std::string& text : items) {
      auto parsed = parse(text);
      if (!parsed) return error(entry, fmt::format("has '{}': {}", text, parsed.error().message), parsed.error().hint);
      out.emplace_back(name(*parsed));
    }
    return out;
  }

  Expected<OpPattern> pattern(const std::string& text, bool type, const EntryName& entry) const {
    const auto bad = [&](std::string_view why) {
      return error(entry, fmt::format("has the malformed pattern '{}': {}", text, why),
                   "write dotted op names with '*', '?' and N-M ranges: layers.0-11.mlp.*");
    };
    if (text.empty()) return bad("it is empty");
    if (text.find_first_of(" \t") != std::string::npos) return bad("it holds a space");
    for (const std::string& part : split(text, '.')) {
      if (part.empty()) return bad("a dotted component is empty");
      if (const std::size_t dash = part.find('-'); dash != std::string::npos && !part.empty() &&
                                                   std::isdigit(static_cast<unsigned char>(part[0]))) {
        int first = 0, last = 0;
        const auto a = std::from_chars(part.data(), part.data() + dash, first);
        const auto b = std::from_chars(part.data() + dash + 1, part.data() + part.size(), last);
        if (a.ptr != part.data() + dash || b.ptr != part.data() + part.size() || b.ec != std::errc())
          return bad(fmt::format("'{}' is not a range N-M", part));
        if (first > last) return bad(fmt::format("the range '{}' is empty", part));
      }
    }
    return OpPattern{text, type};
  }

  Expected<std::vector<OpPattern>> patterns(const std::vector<std::pair<EntryName, YAML::Node>>& fields,
                                            const EntryName& entry) const {
    std::vector<OpPattern> out;
    for (const auto& [field, node] : fields) {
      const bool type = field.path.ends_with(".types");
      if (!type && !field.path.ends_with(".ops")) continue;
      LOOM_ASSIGN_OR_RETURN(const std::vector<std::string> items, texts(node, field));
      for (const std::string& text : items) {
        LOOM_ASSIGN_OR_RETURN(OpPattern p, pattern(text, type, field));
        out.push_back(std::move(p));
      }
    }
    if (out.empty()) return error(entry, "names no ops", "add 'ops: layers.*.mlp.fc1' or 'types: [linear]'");
    return out;
  }

 private:
  std::string source_;
};

EntryName item_name(std::string_view list, std::size_t index, const YAML::Node& node) {
  return {fmt::format("{}[{}]", list, index), line_of(node)};
}

Expected<void> read_partition(const Reader& r, const YAML::Node& node, const EntryName& at, PlanConstraints& out) {
  if (!node.IsSequence()) return r.error(at, "is not a list", "write '- ops: PATTERN' items, each with dims");
  for (std::size_t i = 0; i < node.size(); ++i) {
    PartitionRule rule{.entry = item_name("partition", i, node[i])};
    LOOM_ASSIGN_OR_RETURN(const auto fields, r.entries(node[i], rule.entry, kPartitionKeys));
    LOOM_ASSIGN_OR_RETURN(rule.ops, r.patterns(fields, rule.entry));
    for (const auto& [field, value] : fields) {
      if (field.path.ends_with(".dims")) {
        LOOM_ASSIGN_OR_RETURN(const std::vector<std::string> dims, r.texts(value, field));
        for (const std::string& d : dims)
          if (d == "replicate")
            rule.replicate = true;
          else
            rule.dims.push_back(d);
      } else if (field.path.ends_with(".degrees")) {
        LOOM_ASSIGN_OR_RETURN(rule.degrees, r.whole_numbers(value, field, 2));
      }
    }
    if (rule.dims.empty() && !rule.replicate)
      return r.error(rule.entry, "has no dims", "list the identifiers it may split, or replicate: dims: [o, replicate]");
    out.partition.push_back(std::move(rule));
  }
  return {};
}

Expected<void> read_replicate(const Reader& r, const YAML::Node& node, const EntryName& at, PlanConstraints& out) {
  if (!node.IsSequence()) return r.error(at, "is not a list", "write a list of op patterns: [layers.*.ln1]");
  for (std::size_t i = 0; i < node.size(); ++i) {
    ReplicateRule rule{.entry = item_name("replicate", i, node[i])};
    if (node[i].IsScalar()) {
      LOOM_ASSIGN_OR_RETURN(OpPattern p, r.pattern(node[i].Scalar(), false, rule.entry));
      rule.ops.push_back(std::move(p));
    } else {
      LOOM_ASSIGN_OR_RETURN(const auto fields, r.entries(node[i], rule.entry, kReplicateKeys));
      LOOM_ASSIGN_OR_RETURN(rule.ops, r.patterns(fields, rule.entry));
    }
    out.replicate.push_back(std::move(rule));
  }
  return {};
}

Expected<void> read_placement(const Reader& r, const YAML::Node& node, const EntryName& at, PlanConstraints& out) {
  LOOM_ASSIGN_OR_RETURN(const auto fields, r.entries(node, at, {}));
  for (const auto& [entry, value] : fields) {
    if (entry.path == "placement.stages") {
      out.stages.entry = entry;
      LOOM_ASSIGN_OR_RETURN(out.stages.values, r.whole_numbers(value, entry, 1));
      if (out.stages.values.size() != 1) return r.error(entry, "lists several counts", "give one stage count: stages: 2");
      continue;
    }
    // "stage 3" or 3.
    std::string text = value.IsScalar() ? value.Scalar() : std::string();
    if (text.starts_with("stage ")) text = text.substr(6);
    int stage = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), stage);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || stage < 0)
      return r.error(entry, "is not a stage", "write 'PATTERN: stage N' with N a pipeline rank from 0");
    LOOM_ASSIGN_OR_RETURN(OpPattern p, r.pattern(entry.path.substr(std::string_view("placement.").size()), false, entry));
    out.placement.push_back({entry, std::move(p), stage});
  }
  return {};
}

Expected<void> read_schedule(const Reader& r, const YAML::Node& node, const EntryName& at, PlanConstraints& out) {
  LOOM_ASSIGN_OR_RETURN(const auto fields, r.entries(node, at, kScheduleKeys));
  for (const auto& [entry, value] : fields) {
    if (entry.path == "schedule.kinds") {
      out.schedules.entry = entry;
      const auto parse = [](std::string_view text) -> Expected<std::string> {
        if (text == "interleaved") return std::string(text);
        LOOM_ASSIGN_OR_RETURN(const plan::ScheduleKind kind, plan::parse_schedule_kind(text));
        return std::string(plan::name(kind));
      };
      LOOM_ASSIGN_OR_RETURN(out.schedules.values, r.names(value, entry, parse, std::identity()));
    } else if (entry.path == "schedule.micro_batches") {
      out.micro_batches.entry = entry;
      LOOM_ASSIGN_OR_RETURN(out.micro_batches.values, r.whole_numbers(value, entry, 1));
    } else {
      out.micro_batch_size.entry = entry;
      LOOM_ASSIGN_OR_RETURN(out.micro_batch_size.values, r.whole_numbers(value, entry, std::int64_t{1}));
    }
  }
  return {};
}

Expected<void> read_degrees(const Reader& r, const YAML::Node& node, const EntryName& at, PlanConstraints& out) {
  LOOM_ASSIGN_OR_RETURN(const auto fields, r.entries(node, at, kDegreeKeys));
  for (const auto& [entry, value] : fields) {
    const std::string_view key = std::string_view(entry.path).substr(std::string_view("degrees.").size());
    const auto whole = [&](Allowed<int>& into, int least) -> Expected<void> {
      into.entry = entry;
      LOOM_ASSIGN_OR_RETURN(into.values, r.whole_numbers(value, entry, least));
      return {};
    };
    const auto named = [&](Allowed<std::string>& into, auto parse, auto name) -> Expected<void> {
      into.entry = entry;
      LOOM_ASSIGN_OR_RETURN(into.values, r.names(value, entry, parse, name));
      return {};
    };
    if (key == "dp") LOOM_RETURN_IF_ERROR(whole(out.dp, 1));
    else if (key == "tp") LOOM_RETURN_IF_ERROR(whole(out.tp, 1));
    else if (key == "pp") LOOM_RETURN_IF_ERROR(whole(out.pp, 1));
    else if (key == "zero") {
      LOOM_RETURN_IF_ERROR(whole(out.zero, 0));
      for (int z : out.zero.values)
        if (z > 3) return r.error(entry, fmt::format("has ZeRO stage {}", z), "ZeRO stages are 0 (off) to 3");
    } else if (key == "recompute") {
      LOOM_RETURN_IF_ERROR(named(out.recompute, policy::parse_recompute, [](auto v) { return std::string(policy::name(v)); }));
    } else if (key == "offload") {
      LOOM_RETURN_IF_ERROR(named(out.offload, exec::parse_offload, [](auto v) { return std::string(exec::name(v)); }));
    } else if (key == "overlap") {
      LOOM_RETURN_IF_ERROR(named(out.overlap, policy::parse_overlap, [](auto v) { return std::string(policy::name(v)); }));
    } else {
      out.sequence_parallel.entry = entry;
      LOOM_ASSIGN_OR_RETURN(const std::vector<std::string> items, r.texts(value, entry));
      for (const std::string& text : items) {
        if (text != "true" && text != "false")
          return r.error(entry, fmt::format("has '{}'", text), "write true, false or [true, false]");
        out.sequence_parallel.values.push_back(text == "true");
      }
    }
  }
  return {};
}

}  // namespace

Expected<PlanConstraints> parse_plan_constraints(std::string_view text, std::string_view source) {
  const Reader r(source);
  LOOM_ASSIGN_OR_RETURN(const YAML::Node root,
                        load_one_yaml_document(text, source, {.what = "constraints file",
                                                              .one = "one set of constraints", .schema = kDoc}));
  PlanConstraints out{.source = std::string(source)};
  if (root.IsNull()) return out;  // an empty file constrains nothing
  if (!root.IsMap())
    return fail(fmt::format("constraints file '{}' is not a mapping", source),
                fmt::format("write sections {}; {}", known(kTopKeys), kDoc));
  LOOM_ASSIGN_OR_RETURN(const auto sections, r.entries(root, {}, kTopKeys));
  for (const auto& [entry, node] : sections) {
    if (entry.path == "partition") LOOM_RETURN_IF_ERROR(read_partition(r, node, entry, out));
    else if (entry.path == "replicate") LOOM_RETURN_IF_ERROR(read_replicate(r, node, entry, out));
    else if (entry.path == "placement") LOOM_RETURN_IF_ERROR(read_placement(r, node, entry, out));
    else if (entry.path == "schedule") LOOM_RETURN_IF_ERROR(read_schedule(r, node, entry, out));
    else LOOM_RETURN_IF_ERROR(read_degrees(r, node, entry, out));
  }
  return out;
}

Expected<PlanConstraints> read_plan_constraints(const std::string& path) {
  // Through the one input reader (core/input_file.h): a FIFO or /dev/zero given to --constraints is refused.
  LOOM_ASSIGN_OR_RETURN(const std::string text,
                        read_input_file(path, "constraints file",
                                        "a constraint file lists patterns and degrees (docs/constraints.md); check "
                                        "the path given to --constraints",
                                        kMaxFileBytes));
  return parse_plan_constraints(text, path);
}

}  // namespace loom::search
