#include "loom/comm/step.h"

#include <fmt/format.h>

#include "loom/comm/layout.h"
#include "loom/core/strings.h"

namespace loom::comm {

std::string_view name(Primitive primitive) {
  switch (primitive) {
    case Primitive::all_reduce: return "all-reduce";
    case Primitive::all_gather: return "all-gather";
    case Primitive::reduce_scatter: return "reduce-scatter";
    case Primitive::all_to_all: return "all-to-all";
    case Primitive::local_chunk: return "local-chunk";
    case Primitive::local_value_split: return "local-value-split";
    case Primitive::p2p: return "p2p";
  }
  return "?";
}

bool is_collective(Primitive primitive) {
  return primitive == Primitive::all_reduce || primitive == Primitive::all_gather ||
         primitive == Primitive::reduce_scatter || primitive == Primitive::all_to_all;
}

std::string describe(const Step& step) {
  if (step.primitive == Primitive::p2p) {
    std::int64_t sends = 0;
    for (const Transfer& t : step.transfers) sends += t.src != t.dst ? 1 : 0;
    return fmt::format("{}: {} sends, {} in all, at most {} into one device", step.rule, sends,
                       human_bytes(static_cast<double>(step.buffer_bytes)),
                       human_bytes(static_cast<double>(step.bytes_per_device)));
  }
  if (!is_collective(step.primitive)) return fmt::format("{}: no communication", step.rule);
  const std::size_t n = step.groups.empty() ? 0 : step.groups.front().size();
  std::vector<std::string> shown;
  for (std::size_t i = 0; i < step.groups.size() && i < 4; ++i)
    shown.push_back("[" + devices_to_string(step.groups[i]) + "]");
  if (step.groups.size() > 4) shown.push_back("...");
  return fmt::format("{}: {} group{} of {} {}, {} per device", step.rule, step.groups.size(),
                     step.groups.size() == 1 ? "" : "s", n, join(shown, " "),
                     human_bytes(static_cast<double>(step.bytes_per_device)));
}

}  // namespace loom::comm
