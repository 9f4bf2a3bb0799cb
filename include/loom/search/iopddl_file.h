// The IOPDDL contest's file format (../shared/benchmarks/iopddl/README.md): a JSON object
// {"problem": {"name", "nodes": {"intervals", "costs", "usages"}, "edges": {"nodes", "costs"},
// "usage_limit"}} read into a ShardingProblem unchanged, plain or gzip-compressed; a solution is the JSON
// list of the chosen strategy indices, one per node.
#pragma once

#include <cstdint>
#include <string>

#include "loom/core/error.h"
#include "loom/search/sharding_problem.h"

namespace loom::search {

// The largest file read, after decompression (the largest contest instance is about 40 MiB of JSON).
inline constexpr std::int64_t kMaxIopddlBytes = std::int64_t{1} << 30;

// Parses the text of an instance; `where` names it in errors. Errors name the field ("problem.nodes.costs[3]")
// and what was expected there; the problem is checked (check_problem) before it is returned.
Expected<ShardingProblem> parse_iopddl(const std::string& text, const std::string& where);

// Reads a regular file, gunzipping it when it starts with the gzip magic bytes. Errors: a missing or
// non-regular file, a corrupt gzip stream, a file over kMaxIopddlBytes, and parse_iopddl's.
Expected<ShardingProblem> read_iopddl(const std::string& path);

// The solution's text: "[s0, s1, ...]" and a newline.
std::string iopddl_solution_text(const ShardingChoice& choice);

// Writes the solution atomically (no half-written file on error).
Expected<void> write_iopddl_solution(const std::string& path, const ShardingChoice& choice);

}  // namespace loom::search
