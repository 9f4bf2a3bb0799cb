#include "buffer_names.h"

#include <algorithm>
#include <array>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loom/core/strings.h"

namespace loom::codegen::detail {
namespace {

constexpr std::array<std::string_view, 36> kKeywords = {
    "False", "None",   "True",    "and",      "as",   "assert", "async",  "await", "break",
    "class", "continue", "def",   "del",      "elif", "else",   "except", "finally", "for",
    "from",  "global", "if",      "import",   "in",   "is",     "lambda", "nonlocal", "not",
    "or",    "pass",   "raise",   "return",   "try",  "while",  "with",   "yield",  "rt"};

}  // namespace

std::string python_identifier(std::string_view name) {
  std::string out;
  for (char c : name) out += (std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_') ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out.front())) != 0) out = "t_" + out;
  if (std::ranges::find(kKeywords, out) != kKeywords.end()) out += '_';
  return out;
}

std::vector<std::string> buffer_variables(const exec::ExecPlan& exec) {
  const ir::Graph& graph = *exec.plan->graph;
  std::vector<std::string> names(exec.buffers.size());
  std::map<std::pair<int, std::string>, int> next;  // (device, base) -> next counter
  for (std::size_t b = 0; b < exec.buffers.size(); ++b) {
    const exec::Buffer& buffer = exec.buffers[b];
    const std::string base = python_identifier(graph.tensor(buffer.piece.tensor).name);
    names[b] = fmt::format("{}__{}", base, next[{buffer.device, base}]++);
  }
  return names;
}

std::string box_literal(const plan::SubTensor& piece) {
  std::vector<std::string> ranges;
  for (const plan::IndexRange& r : piece.box) {
    const plan::IndexRange n = r.normalized();
    ranges.push_back(fmt::format("({}, {}, {})", n.start, n.stop, n.step));
  }
  return ranges.size() == 1 ? "(" + ranges[0] + ",)" : "(" + join(ranges, ", ") + ")";
}

std::string piece_literal(const plan::SubTensor& piece) {
  return fmt::format("({}, ({}, {}))", box_literal(piece), piece.value.index, piece.value.count);
}

std::string python_string(std::string_view text) { return nlohmann::json(std::string(text)).dump(); }

}  // namespace loom::codegen::detail
