#include "loom/search/iopddl_file.h"

#include <fmt/format.h>
#include <zlib.h>

#include <array>
#include <nlohmann/json.hpp>

#include "loom/core/atomic_file.h"
#include "loom/core/input_file.h"
#include "loom/core/json_error.h"

namespace loom::search {
namespace {

using Json = nlohmann::json;

// Field access that names the field in its errors rather than passing nlohmann's message through.
struct Reader {
  const std::string& where;

  std::unexpected<Error> bad(const std::string& field, std::string_view expected) const {
    return fail(fmt::format("{}: {} must be {}", where, field, expected),
                "see ../shared/benchmarks/iopddl/example.json for the format");
  }

  Expected<const Json*> member(const Json& object, const std::string& field, const std::string& key) const {
    if (!object.is_object()) return bad(field, "an object");
    auto it = object.find(key);
    if (it == object.end())
      return fail(fmt::format("{}: {} has no '{}'", where, field, key),
                  "see ../shared/benchmarks/iopddl/example.json for the format");
    return &*it;
  }

  Expected<std::int64_t> integer(const Json& value, const std::string& field) const {
    if (value.is_number_unsigned()) {
      const auto v = value.get<std::uint64_t>();
      if (v > static_cast<std::uint64_t>(kForbidden)) return bad(field, "an integer at most 2^63 - 1");
      return static_cast<std::int64_t>(v);
    }
    if (value.is_number_integer()) return value.get<std::int64_t>();
    return bad(field, "an integer");
  }

  // `field` is formatted only on an error: the largest instances hold millions of integers.
  static bool plain_integer(const Json& value) {
    return value.is_number_integer() &&
           (!value.is_number_unsigned() || value.get<std::uint64_t>() <= static_cast<std::uint64_t>(kForbidden));
  }

  template <class Field>
  Expected<std::vector<std::int64_t>> integers(const Json& value, const Field& field) const {
    if (!value.is_array()) return bad(field(), "a list of integers");
    std::vector<std::int64_t> out;
    out.reserve(value.size());
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (!plain_integer(value[i])) return std::unexpected(integer(value[i], fmt::format("{}[{}]", field(), i)).error());
      out.push_back(value[i].is_number_unsigned() ? static_cast<std::int64_t>(value[i].get<std::uint64_t>())
                                                  : value[i].get<std::int64_t>());
    }
    return out;
  }

  Expected<std::vector<std::vector<std::int64_t>>> rows(const Json& value, const std::string& field) const {
    if (!value.is_array()) return bad(field, "a list of lists of integers");
    std::vector<std::vector<std::int64_t>> out;
    out.reserve(value.size());
    for (std::size_t i = 0; i < value.size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(auto row, integers(value[i], [&] { return fmt::format("{}[{}]", field, i); }));
      out.push_back(std::move(row));
    }
    return out;
  }

  Expected<std::vector<std::vector<std::int64_t>>> pairs(const Json& value, const std::string& field) const {
    LOOM_ASSIGN_OR_RETURN(auto out, rows(value, field));
    for (std::size_t i = 0; i < out.size(); ++i)
      if (out[i].size() != 2) return bad(fmt::format("{}[{}]", field, i), "a pair [a, b]");
    return out;
  }
};

Expected<std::string> gunzip(const std::string& data, const std::string& path) {
  z_stream stream{};
  if (inflateInit2(&stream, 15 + 32) != Z_OK) return fail(fmt::format("{}: cannot start gzip decompression", path));
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  std::string out;
  std::array<char, 1 << 16> buffer{};
  int status = Z_OK;
  while (status != Z_STREAM_END) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer.data());
    stream.avail_out = static_cast<uInt>(buffer.size());
    status = inflate(&stream, Z_NO_FLUSH);
    if (status != Z_OK && status != Z_STREAM_END) {
      inflateEnd(&stream);
      return fail(fmt::format("{}: the gzip stream is corrupt or truncated", path),
                  "check the file, e.g. with `gzip -t`");
    }
    out.append(buffer.data(), buffer.size() - stream.avail_out);
    if (static_cast<std::int64_t>(out.size()) > kMaxIopddlBytes) {
      inflateEnd(&stream);
      return fail(fmt::format("{}: decompresses to more than {} bytes", path, kMaxIopddlBytes),
                  "IOPDDL instances are at most tens of MiB");
    }
  }
  inflateEnd(&stream);
  return out;
}

}  // namespace

Expected<ShardingProblem> parse_iopddl(const std::string& text, const std::string& where) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::exception& e) {
    return fail(fmt::format("{}: {}", where, describe_json_error(e.what())),
                "an IOPDDL instance is one JSON object {\"problem\": ...}");
  }
  const Reader r{where};
  LOOM_ASSIGN_OR_RETURN(const Json* problem, r.member(root, "the file", "problem"));
  ShardingProblem out;
  if (auto it = problem->find("name"); problem->is_object() && it != problem->end() && it->is_string())
    out.name = it->get<std::string>();
  LOOM_ASSIGN_OR_RETURN(const Json* nodes, r.member(*problem, "problem", "nodes"));
  LOOM_ASSIGN_OR_RETURN(const Json* edges, r.member(*problem, "problem", "edges"));
  LOOM_ASSIGN_OR_RETURN(const Json* intervals_json, r.member(*nodes, "problem.nodes", "intervals"));
  LOOM_ASSIGN_OR_RETURN(const Json* costs_json, r.member(*nodes, "problem.nodes", "costs"));
  LOOM_ASSIGN_OR_RETURN(const Json* usages_json, r.member(*nodes, "problem.nodes", "usages"));
  LOOM_ASSIGN_OR_RETURN(auto intervals, r.pairs(*intervals_json, "problem.nodes.intervals"));
  LOOM_ASSIGN_OR_RETURN(auto costs, r.rows(*costs_json, "problem.nodes.costs"));
  LOOM_ASSIGN_OR_RETURN(auto usages, r.rows(*usages_json, "problem.nodes.usages"));
  if (costs.size() != intervals.size() || usages.size() != intervals.size())
    return fail(fmt::format("{}: problem.nodes has {} intervals, {} cost lists and {} usage lists", where,
                            intervals.size(), costs.size(), usages.size()),
                "give one interval, one cost list and one usage list per node");
  out.nodes.resize(intervals.size());
  for (std::size_t i = 0; i < intervals.size(); ++i) {
    out.nodes[i].start = intervals[i][0];
    out.nodes[i].end = intervals[i][1];
    out.nodes[i].costs = std::move(costs[i]);
    out.nodes[i].usages = std::move(usages[i]);
  }
  LOOM_ASSIGN_OR_RETURN(const Json* ends_json, r.member(*edges, "problem.edges", "nodes"));
  LOOM_ASSIGN_OR_RETURN(const Json* tables_json, r.member(*edges, "problem.edges", "costs"));
  LOOM_ASSIGN_OR_RETURN(auto ends, r.pairs(*ends_json, "problem.edges.nodes"));
  LOOM_ASSIGN_OR_RETURN(auto tables, r.rows(*tables_json, "problem.edges.costs"));
  if (tables.size() != ends.size())
    return fail(fmt::format("{}: problem.edges has {} node pairs but {} cost tables", where, ends.size(),
                            tables.size()),
                "give one cost table per edge");
  out.edges.resize(ends.size());
  for (std::size_t e = 0; e < ends.size(); ++e) {
    for (std::int64_t end : ends[e])
      if (end < 0 || end >= static_cast<std::int64_t>(out.nodes.size()))
        return fail(fmt::format("{}: problem.edges.nodes[{}] names node {}, but there are {} nodes", where, e, end,
                                out.nodes.size()));
    out.edges[e].from = static_cast<int>(ends[e][0]);
    out.edges[e].to = static_cast<int>(ends[e][1]);
    out.edges[e].costs = std::move(tables[e]);
  }
  if (auto it = problem->find("usage_limit"); it != problem->end()) {
    LOOM_ASSIGN_OR_RETURN(out.usage_limit, r.integer(*it, "problem.usage_limit"));
  }
  if (auto checked = check_problem(out); !checked) {
    Error error = std::move(checked).error();
    error.message = fmt::format("{}: {}", where, error.message);
    return std::unexpected(std::move(error));
  }
  return out;
}

Expected<ShardingProblem> read_iopddl(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string data,
                        read_input_file(path, "IOPDDL instance",
                                        "give the path of an IOPDDL instance (.json or .json.gz, at most tens of MiB)",
                                        static_cast<std::uintmax_t>(kMaxIopddlBytes)));
  if (data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f && static_cast<unsigned char>(data[1]) == 0x8b) {
    LOOM_ASSIGN_OR_RETURN(data, gunzip(data, path));
  }
  return parse_iopddl(data, path);
}

std::string iopddl_solution_text(const ShardingChoice& choice) {
  return fmt::format("[{}]\n", fmt::join(choice.strategies, ", "));
}

Expected<void> write_iopddl_solution(const std::string& path, const ShardingChoice& choice) {
  return write_file_atomically(path, iopddl_solution_text(choice), "the solution");
}

}  // namespace loom::search
