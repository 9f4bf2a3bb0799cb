#include "loom/sim/chrome_trace.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "loom/sim/device_groups.h"

namespace loom::sim {
namespace {

// The bytes an event moves: a collective's input, a send's or recv's buffer; 0 for computes and locals.
std::int64_t bytes_moved(const exec::ExecPlan& exec, const Event& event) {
  if (event.device < 0 || static_cast<std::size_t>(event.device) >= exec.programs.size()) return 0;
  const auto& program = exec.programs[static_cast<std::size_t>(event.device)];
  if (event.instruction < 0 || static_cast<std::size_t>(event.instruction) >= program.size()) return 0;
  const exec::Instruction& instruction = program[static_cast<std::size_t>(event.instruction)];
  exec::BufferId buffer = exec::kNoBuffer;
  if (const auto* c = std::get_if<exec::Collective>(&instruction)) buffer = c->input;
  else if (const auto* s = std::get_if<exec::Send>(&instruction)) buffer = s->buffer;
  else if (const auto* r = std::get_if<exec::Recv>(&instruction)) buffer = r->buffer;
  if (buffer == exec::kNoBuffer || buffer.index() >= exec.buffers.size()) return 0;
  return exec.buffer(buffer).bytes;
}

nlohmann::json metadata(std::string_view what, int pid, int tid, std::string label) {
  return {{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", std::move(label)}}}};
}

}  // namespace

std::string chrome_trace_json(const exec::ExecPlan& exec, const SimResult& result) {
  nlohmann::json events = nlohmann::json::array();
  // One process per simulated device, named for the devices whose times it gives.
  for (const DeviceGroup& group : device_groups(result)) {
    const int d = group.representative;
    const std::string label = group.devices.size() == 1 ? fmt::format("device {}", d)
                                                        : fmt::format("device {} (for devices {})", d, device_ranges(group.devices));
    events.push_back(metadata("process_name", d, 0, label));
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", d}, {"tid", 0}, {"args", {{"sort_index", d}}}});
    for (Stream stream : {Stream::compute, Stream::communication})
      events.push_back(metadata("thread_name", d, static_cast<int>(stream), std::string(name(stream))));
  }
  for (const Event& e : result.events) {
    nlohmann::json args = {{"kind", name(e.kind)}, {"instruction", e.instruction}};
    if (e.kind == EventKind::collective || e.kind == EventKind::send || e.kind == EventKind::recv)
      args["bytes"] = bytes_moved(exec, e);
    events.push_back({{"name", e.name},
                      {"cat", name(e.kind)},
                      {"ph", "X"},
                      {"ts", e.start * 1e6},
                      {"dur", (e.end - e.start) * 1e6},
                      {"pid", e.device},
                      {"tid", static_cast<int>(e.stream)},
                      {"args", std::move(args)}});
  }
  const nlohmann::json trace = {{"displayTimeUnit", "ms"}, {"traceEvents", std::move(events)}};
  return trace.dump() + "\n";
}

}  // namespace loom::sim
