#include "loom/policy/layer_degrees.h"

#include <charconv>

#include <fmt/format.h>

namespace loom::policy {
namespace {

constexpr std::string_view kForm = "give runs DEGREExLAYERS joined by commas, e.g. --tp-layers 2x8,4x16";

Expected<int> positive(std::string_view text, std::string_view what, std::string_view run) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || value < 1)
    return fail(fmt::format("tp layers run '{}': the {} '{}' is not a whole number of at least 1", run, what, text),
                std::string(kForm));
  return value;
}

}  // namespace

Expected<std::vector<DegreeRun>> parse_layer_degrees(std::string_view text) {
  if (text.empty()) return fail("tp layers: the spec is empty", std::string(kForm));
  std::vector<DegreeRun> runs;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    const std::string_view run = text.substr(begin, comma - begin);
    const std::size_t x = run.find('x');
    if (run.empty() || x == std::string_view::npos)
      return fail(fmt::format("tp layers '{}': the run '{}' is not DEGREExLAYERS", text, run), std::string(kForm));
    LOOM_ASSIGN_OR_RETURN(const int degree, positive(run.substr(0, x), "degree", run));
    LOOM_ASSIGN_OR_RETURN(const int layers, positive(run.substr(x + 1), "layer count", run));
    runs.push_back({degree, layers});
    begin = comma + 1;
  }
  return runs;
}

std::string to_string(std::span<const DegreeRun> runs) {
  std::string text;
  for (const DegreeRun& r : runs) text += fmt::format("{}{}x{}", text.empty() ? "" : ",", r.degree, r.layers);
  return text;
}

std::vector<int> expand(std::span<const DegreeRun> runs) {
  std::vector<int> out;
  for (const DegreeRun& r : runs) out.insert(out.end(), static_cast<std::size_t>(r.layers), r.degree);
  return out;
}

std::vector<DegreeRun> runs_of(std::span<const int> per_layer) {
  std::vector<DegreeRun> runs;
  for (const int degree : per_layer) {
    if (!runs.empty() && runs.back().degree == degree) ++runs.back().layers;
    else runs.push_back({degree, 1});
  }
  return runs;
}

Expected<void> check_layer_degrees(std::span<const int> per_layer, int tp, int layers) {
  const std::string spec = to_string(runs_of(per_layer));
  if (static_cast<int>(per_layer.size()) != layers)
    return fail(fmt::format("tp layers {}: the runs cover {} layers, but the model has {}", spec, per_layer.size(),
                            layers),
                fmt::format("give layer counts that sum to {}", layers));
  for (std::size_t i = 0; i < per_layer.size(); ++i)
    if (per_layer[i] < 1 || tp % per_layer[i] != 0)
      return fail(fmt::format("tp layers {}: layer {} has degree {}, which does not divide the tp group {}", spec, i,
                              per_layer[i], tp),
                  fmt::format("use degrees that divide tp {} (a layer at degree t runs tp / t data-parallel copies "
                              "inside the group)",
                              tp));
  return {};
}

}  // namespace loom::policy
