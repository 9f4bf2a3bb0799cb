// Profile requests: the plan's distinct missing keys, the request file, the timer's results file and
// the device name a measurement is filed under.
#include "loom/cost/profile_requests.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loom/core/json_error.h"

namespace loom::cost {
namespace {

using nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

constexpr int kRequestVersion = 1;
constexpr int kResultsVersion = 1;
constexpr std::string_view kResultsHint =
    R"(expected {"version": 1, "device": {"type", "name"}, "results": [{"key": {"op", "shapes", "dtype"}, "seconds"}], "unsupported": [{"key", "reason"}]})";

std::vector<TensorSpec> specs_of(const ir::Graph& graph, std::span<const plan::SubTensor> pieces) {
  std::vector<TensorSpec> specs;
  for (const plan::SubTensor& piece : pieces)
    specs.push_back({piece.local_shape(), graph.tensor(piece.tensor).dtype});
  return specs;
}

std::vector<std::int64_t> int_list_or_empty(const ir::Attrs& attrs, std::string_view name) {
  Expected<std::vector<std::int64_t>> list = ir::get_int_list(attrs, name);
  return list ? *list : std::vector<std::int64_t>{};
}

// The request a sub-op asks for; an error (the reason) when its instance cannot be described.
Expected<ProfileRequest> request_of(const plan::Plan& plan, plan::SubOpId id, ProfileKey key) {
  const ir::Graph& graph = *plan.graph;
  const plan::SubOp& sub_op = plan.sub_op(id);
  const ir::Op& op = graph.op(sub_op.op);
  ProfileRequest request{.key = std::move(key), .op_type = op.type, .example = sub_op.name};
  const plan::SubOp* instance = &sub_op;
  const ir::Op* instance_op = &op;
  if (op.is_mirror()) {
    if (!sub_op.mirror.valid())
      return fail(fmt::format("backward part '{}' has no forward part to run through autograd", sub_op.name));
    instance = &plan.sub_op(sub_op.mirror);
    instance_op = &graph.op(instance->op);
    request.backward = true;
    request.grad_inputs = int_list_or_empty(op.attrs, "grad_inputs");
    request.grad_outputs = int_list_or_empty(op.attrs, "grad_outputs");
  }
  request.inputs = specs_of(graph, instance->inputs);
  request.outputs = specs_of(graph, instance->outputs);
  request.attrs = instance_op->attrs;
  return request;
}

bool same_instance(const ProfileRequest& a, const ProfileRequest& b) {
  return a.inputs == b.inputs && a.outputs == b.outputs && a.attrs == b.attrs && a.grad_inputs == b.grad_inputs &&
         a.grad_outputs == b.grad_outputs;
}

OrderedJson shape_json(const ir::Shape& shape) { return OrderedJson(shape.dims); }

OrderedJson key_json(const ProfileKey& key) {
  OrderedJson shapes = OrderedJson::array();
  for (const ir::Shape& s : key.shapes) shapes.push_back(shape_json(s));
  return OrderedJson{{"op", key.op}, {"shapes", std::move(shapes)}, {"dtype", ir::name(key.dtype)}};
}

OrderedJson specs_json(std::span<const TensorSpec> specs) {
  OrderedJson list = OrderedJson::array();
  for (const TensorSpec& s : specs) list.push_back(OrderedJson{{"shape", shape_json(s.shape)}, {"dtype", ir::name(s.dtype)}});
  return list;
}

OrderedJson attr_json(const ir::AttrValue& value) {
  struct Visitor {
    OrderedJson operator()(std::int64_t v) const { return v; }
    OrderedJson operator()(bool v) const { return v; }
    OrderedJson operator()(const std::string& v) const { return v; }
    OrderedJson operator()(const std::vector<std::int64_t>& v) const { return OrderedJson(v); }
    // JSON has no non-finite numbers; the timer reads these strings back as floats.
    OrderedJson operator()(double v) const {
      if (std::isnan(v)) return "nan";
      if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
      return v;
    }
  };
  return std::visit(Visitor{}, value);
}

// An optional string field of `object`: `fallback` when absent, an error when present but not a string (json's
// own value() would throw).
Expected<std::string> optional_string(const json& object, std::string_view field, std::string_view where,
                                      std::string fallback) {
  const auto it = object.find(field);
  if (it == object.end()) return fallback;
  if (!it->is_string())
    return fail(fmt::format("{}: \"{}\" must be a string, got {}", where, field, it->dump()), std::string(kResultsHint));
  return it->get<std::string>();
}

Expected<ProfileKey> parse_key(const json& j, std::string_view where, const std::string& device) {
  if (!j.is_object()) return fail(fmt::format("{}: \"key\" must be an object", where), std::string(kResultsHint));
  ProfileKey key{.device = device};
  if (!j.contains("op") || !j["op"].is_string() || j["op"].get<std::string>().empty())
    return fail(fmt::format("{}: the key's \"op\" must be a non-empty string", where));
  key.op = j["op"].get<std::string>();
  if (!j.contains("dtype") || !j["dtype"].is_string())
    return fail(fmt::format("{}: the key's \"dtype\" must be a string", where));
  LOOM_ASSIGN_OR_RETURN(key.dtype, with_context(ir::parse_dtype(j["dtype"].get<std::string>()), where));
  if (!j.contains("shapes") || !j["shapes"].is_array())
    return fail(fmt::format("{}: the key's \"shapes\" must be an array of shapes", where));
  for (const json& shape : j["shapes"]) {
    if (!shape.is_array()) return fail(fmt::format("{}: a shape must be an array of sizes", where));
    std::vector<std::int64_t> dims;
    for (const json& d : shape) {
      if (!d.is_number_integer() || d.get<std::int64_t>() < 0)
        return fail(fmt::format("{}: size {} is not a non-negative integer", where, d.dump()));
      dims.push_back(d.get<std::int64_t>());
    }
    key.shapes.emplace_back(std::move(dims));
  }
  return key;
}

std::string upper_alnum(std::string_view text) {
  std::string out;
  for (char c : text)
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

ProfileRequests profile_requests(const plan::Plan& plan, const ComputeModel& model) {
  ProfileRequests out;
  std::map<ProfileKey, ProfileRequest> missing;
  std::map<ProfileKey, UnresolvedKey> unresolved;
  std::map<ProfileKey, std::vector<ProfileRequest>> instances;  // distinct instances per key, to count variants
  std::set<ProfileKey> present;
  for (plan::SubOpId id : plan.live_sub_ops()) {
    ++out.live_sub_ops;
    ProfileKey key = model.profile_key(id);
    if (model.estimate(id).measured) {
      present.insert(std::move(key));
      continue;
    }
    Expected<ProfileRequest> request = request_of(plan, id, key);
    if (!request) {
      if (!missing.contains(key))
        unresolved.try_emplace(key, UnresolvedKey{key, plan.sub_op(id).name, request.error().message});
      continue;
    }
    unresolved.erase(key);  // another sub-op of the key describes it
    std::vector<ProfileRequest>& seen = instances[key];
    if (std::none_of(seen.begin(), seen.end(), [&](const ProfileRequest& r) { return same_instance(r, *request); }))
      seen.push_back(*request);
    auto [it, inserted] = missing.try_emplace(key, std::move(*request));
    it->second.sub_ops += 1;
    it->second.variants = seen.size();
  }
  out.present = present.size();
  for (auto& [key, request] : missing) out.requests.push_back(std::move(request));
  for (auto& [key, entry] : unresolved) out.unresolved.push_back(std::move(entry));
  return out;
}

std::string requests_to_json(std::span<const ProfileRequest> requests, std::string_view device,
                             const std::map<std::string, double>& timing) {
  OrderedJson list = OrderedJson::array();
  for (const ProfileRequest& r : requests) {
    OrderedJson attrs = OrderedJson::object();
    for (const auto& [name, value] : r.attrs) attrs[name] = attr_json(value);  // Attrs is sorted
    OrderedJson entry{{"key", key_json(r.key)},
                      {"op_type", r.op_type},
                      {"pass", r.backward ? "backward" : "forward"},
                      {"inputs", specs_json(r.inputs)},
                      {"outputs", specs_json(r.outputs)},
                      {"attrs", std::move(attrs)}};
    if (r.backward) {
      entry["grad_inputs"] = r.grad_inputs;
      entry["grad_outputs"] = r.grad_outputs;
    }
    entry["example"] = r.example;
    entry["sub_ops"] = r.sub_ops;
    entry["variants"] = r.variants;
    list.push_back(std::move(entry));
  }
  OrderedJson timing_json = OrderedJson::object();
  for (const auto& [name, value] : timing) timing_json[name] = value;
  OrderedJson doc{{"version", kRequestVersion},
                  {"device", device},
                  {"timing", std::move(timing_json)},
                  {"requests", std::move(list)}};
  return doc.dump(1) + "\n";
}

Expected<TimerResults> parse_timer_results(const std::string& text, const std::string& source,
                                           const std::string& device) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number beyond double (1e400)
    return fail(fmt::format("{}: {}", source, describe_json_error(e.what())), std::string(kResultsHint));
  }
  if (!doc.is_object() || !doc.contains("results") || !doc["results"].is_array())
    return fail(fmt::format("{}: not a timer results file", source), std::string(kResultsHint));
  if (!doc.contains("version") || doc["version"] != kResultsVersion)
    return fail(fmt::format("{}: unsupported results version {}", source, doc.value("version", json()).dump()),
                fmt::format("this build reads version {}", kResultsVersion));
  TimerResults results;
  if (doc.contains("device") && doc["device"].is_object()) {
    const std::string where = fmt::format("{}: device", source);
    LOOM_ASSIGN_OR_RETURN(results.device_type, optional_string(doc["device"], "type", where, ""));
    LOOM_ASSIGN_OR_RETURN(results.device_name, optional_string(doc["device"], "name", where, ""));
  }
  if (doc.contains("torch") && doc["torch"].is_string()) results.torch_version = doc["torch"].get<std::string>();
  const json& list = doc["results"];
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string where = fmt::format("{}: results[{}]", source, i);
    const json& entry = list[i];
    if (!entry.is_object() || !entry.contains("key"))
      return fail(fmt::format("{}: an entry needs \"key\" and \"seconds\"", where), std::string(kResultsHint));
    LOOM_ASSIGN_OR_RETURN(ProfileKey key, parse_key(entry["key"], where, device));
    if (!entry.contains("seconds") || !entry["seconds"].is_number())
      return fail(fmt::format("{}: \"seconds\" must be a number", where));
    const double seconds = entry["seconds"].get<double>();
    if (!std::isfinite(seconds) || seconds <= 0)
      return fail(fmt::format("{}: \"seconds\" must be positive, got {}", where, seconds));
    results.measured.emplace_back(std::move(key), seconds);
  }
  if (doc.contains("unsupported")) {
    const json& skipped = doc["unsupported"];
    if (!skipped.is_array()) return fail(fmt::format("{}: \"unsupported\" must be an array", source));
    for (std::size_t i = 0; i < skipped.size(); ++i) {
      const std::string where = fmt::format("{}: unsupported[{}]", source, i);
      if (!skipped[i].is_object() || !skipped[i].contains("key"))
        return fail(fmt::format("{}: an entry needs \"key\" and \"reason\"", where), std::string(kResultsHint));
      LOOM_ASSIGN_OR_RETURN(ProfileKey key, parse_key(skipped[i]["key"], where, device));
      LOOM_ASSIGN_OR_RETURN(std::string reason, optional_string(skipped[i], "reason", where, "no reason given"));
      results.unsupported.emplace_back(std::move(key), std::move(reason));
    }
  }
  return results;
}

MergeSummary merge_results(ProfileDb& db, const ProfileRequests& wanted, const TimerResults& results) {
  MergeSummary summary;
  std::set<ProfileKey> asked, done, skipped;
  for (const ProfileRequest& r : wanted.requests) asked.insert(r.key);
  for (const auto& [key, seconds] : results.measured) {
    if (!asked.contains(key) || done.contains(key)) {
      ++summary.ignored;
      continue;
    }
    db.set(key, seconds);
    done.insert(key);
    ++summary.measured;
  }
  for (const auto& [key, reason] : results.unsupported)
    if (asked.contains(key) && !done.contains(key) && skipped.insert(key).second) summary.skipped.emplace_back(key, reason);
  for (const UnresolvedKey& u : wanted.unresolved) summary.skipped.emplace_back(u.key, u.reason);
  for (const ProfileKey& key : asked)
    if (!done.contains(key) && !skipped.contains(key)) ++summary.missing;
  return summary;
}

std::string profile_device_name(std::string_view torch_name, std::span<const cluster::GpuSpec> known) {
  const std::string name = upper_alnum(torch_name);
  if (name == "CPU") return "cpu";
  const cluster::GpuSpec* best = nullptr;
  std::size_t best_length = 0;
  for (const cluster::GpuSpec& gpu : known) {
    const std::string model = upper_alnum(gpu.name.substr(0, gpu.name.find('-')));
    if (!model.empty() && name.find(model) != std::string::npos && model.size() > best_length) {
      best = &gpu;
      best_length = model.size();
    }
  }
  return best != nullptr ? best->name : std::string(torch_name);
}

}  // namespace loom::cost
