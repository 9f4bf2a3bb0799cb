// The profile database's JSON form and its file. Writing goes through a temporary file renamed into
// place, so a reader never sees half a database.
#include "loom/cost/profile_db.h"

#include <unistd.h>

#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loom/core/atomic_file.h"
#include "loom/core/input_file.h"
#include "loom/core/json_error.h"

namespace loom::cost {
namespace {

using nlohmann::json;

constexpr int kVersion = 1;
constexpr std::string_view kFormatHint = R"(expected {"version": 1, "entries": [{"op", "shapes", "dtype", "device", "seconds"}, ...]})";

Expected<ir::Shape> parse_shape(const json& value, std::string_view where) {
  if (!value.is_array()) return fail(fmt::format("{}: a shape must be an array of sizes", where));
  std::vector<std::int64_t> dims;
  for (const json& d : value) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 0)
      return fail(fmt::format("{}: size {} is not a non-negative integer", where, d.dump()));
    dims.push_back(d.get<std::int64_t>());
  }
  return ir::Shape(std::move(dims));
}

Expected<std::string> string_field(const json& entry, const char* field, std::string_view where) {
  if (!entry.contains(field)) return fail(fmt::format("{}: missing \"{}\"", where, field), std::string(kFormatHint));
  if (!entry[field].is_string()) return fail(fmt::format("{}: \"{}\" must be a string", where, field));
  return entry[field].get<std::string>();
}

Expected<std::pair<ProfileKey, double>> parse_entry(const json& entry, std::string_view where) {
  if (!entry.is_object()) return fail(fmt::format("{}: an entry must be an object", where), std::string(kFormatHint));
  ProfileKey key;
  LOOM_ASSIGN_OR_RETURN(key.op, string_field(entry, "op", where));
  if (key.op.empty()) return fail(fmt::format("{}: \"op\" is empty", where));
  LOOM_ASSIGN_OR_RETURN(key.device, string_field(entry, "device", where));
  LOOM_ASSIGN_OR_RETURN(std::string dtype, string_field(entry, "dtype", where));
  Expected<ir::DType> parsed = ir::parse_dtype(dtype);
  if (!parsed) return std::unexpected(with_context(std::move(parsed).error(), where));
  key.dtype = *parsed;
  if (!entry.contains("shapes") || !entry["shapes"].is_array())
    return fail(fmt::format("{}: \"shapes\" must be an array of shapes", where), std::string(kFormatHint));
  for (std::size_t i = 0; i < entry["shapes"].size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(ir::Shape shape, parse_shape(entry["shapes"][i], fmt::format("{}, shape {}", where, i)));
    key.shapes.push_back(std::move(shape));
  }
  if (!entry.contains("seconds") || !entry["seconds"].is_number())
    return fail(fmt::format("{}: \"seconds\" must be a number", where), std::string(kFormatHint));
  const double seconds = entry["seconds"].get<double>();
  if (!std::isfinite(seconds) || seconds <= 0)
    return fail(fmt::format("{}: \"seconds\" must be positive, got {}", where, seconds));
  return std::pair{std::move(key), seconds};
}

}  // namespace

std::string ProfileKey::to_string() const {
  std::string shapes_text;
  for (const ir::Shape& s : shapes) shapes_text += " " + s.to_string();
  return fmt::format("{}{} {} on {}", op, shapes_text, ir::name(dtype), device);
}

Expected<ProfileDb> ProfileDb::parse(const std::string& text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number beyond double (1e400)
    return fail(fmt::format("{}: {}", source, describe_json_error(e.what())), "the profile database is a JSON file");
  }
  if (!doc.is_object() || !doc.contains("entries") || !doc["entries"].is_array())
    return fail(fmt::format("{}: not a profile database", source), std::string(kFormatHint));
  if (!doc.contains("version") || doc["version"] != kVersion)
    return fail(fmt::format("{}: unsupported profile version {}", source, doc.value("version", json()).dump()),
                fmt::format("this build reads version {}", kVersion));
  ProfileDb db;
  std::map<ProfileKey, std::size_t> first_seen;
  const json& entries = doc["entries"];
  for (std::size_t i = 0; i < entries.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(auto parsed, parse_entry(entries[i], fmt::format("{}: entry {}", source, i)));
    auto [it, inserted] = first_seen.emplace(parsed.first, i);
    if (!inserted)
      return fail(fmt::format("{}: entry {} repeats the key of entry {} ({})", source, i, it->second,
                              parsed.first.to_string()),
                  "keep one measurement per key");
    db.entries_.emplace(std::move(parsed.first), parsed.second);
  }
  return db;
}

Expected<ProfileDb> ProfileDb::load(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text,
                        read_input_file(path, "profile database", "`loom profile --db FILE` writes one"));
  return parse(std::move(text), path);
}

std::string ProfileDb::to_json() const {
  json entries = json::array();
  for (const auto& [key, seconds] : entries_) {
    json shapes = json::array();
    for (const ir::Shape& s : key.shapes) shapes.push_back(s.dims);
    entries.push_back(json{{"op", key.op},
                           {"shapes", std::move(shapes)},
                           {"dtype", ir::name(key.dtype)},
                           {"device", key.device},
                           {"seconds", seconds}});
  }
  return json{{"version", kVersion}, {"entries", std::move(entries)}}.dump(1) + "\n";
}

Expected<void> ProfileDb::save(const std::string& path) const {
  return write_file_atomically(path, to_json(), "the profile database");
}

void ProfileDb::set(ProfileKey key, double seconds) {
  assert(std::isfinite(seconds) && seconds > 0);
  entries_.insert_or_assign(std::move(key), seconds);
}

std::optional<double> ProfileDb::find(const ProfileKey& key) const {
  if (auto it = entries_.find(key); it != entries_.end()) return it->second;
  return std::nullopt;
}

}  // namespace loom::cost
