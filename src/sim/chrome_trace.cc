#include "loom/sim/chrome_trace.h"

#include <fmt/format.h>

#include <iterator>

#include "loom/exec/instruction_buffers.h"

namespace loom::sim {
namespace {

// The bytes an event moves: a collective's input, a send's or recv's buffer; 0 for computes and locals.
std::int64_t bytes_moved(const exec::ExecPlan& exec, const Event& event) {
  if (event.device < 0 || static_cast<std::size_t>(event.device) >= exec.programs.size()) return 0;
  const auto& program = exec.programs[static_cast<std::size_t>(event.device)];
  if (event.instruction < 0 || static_cast<std::size_t>(event.instruction) >= program.size()) return 0;
  const exec::Instruction& instruction = program[static_cast<std::size_t>(event.instruction)];
  const auto bytes = [&](exec::BufferId b) { return b.index() < exec.buffers.size() ? exec.buffer(b).bytes : 0; };
  if (const auto c = exec::collective_call(instruction)) {
    std::int64_t sum = 0;
    for (exec::BufferId in : c->inputs) sum += bytes(in);
    return sum;
  }
  if (const auto* s = std::get_if<exec::Send>(&instruction)) return bytes(s->buffer);
  if (const auto* r = std::get_if<exec::Recv>(&instruction)) return bytes(r->buffer);
  return 0;
}

// `text` as a JSON string. Event names are op names (printable ASCII); anything else is escaped too.
void append_quoted(fmt::memory_buffer& out, std::string_view text) {
  out.push_back('"');
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (c < 0x20) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
    } else {
      out.push_back(ch);
    }
  }
  out.push_back('"');
}

}  // namespace

// Written directly rather than through a JSON tree: a folded 1024-GPU step has ~500k events, and the
// tree took seconds to build and dump.
std::string chrome_trace_json(const exec::ExecPlan& exec, const SimResult& result, std::span<const TraceTrack> tracks) {
  fmt::memory_buffer out;
  auto it = std::back_inserter(out);
  fmt::format_to(it, "{{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
  bool first = true;
  const auto separator = [&] {
    if (!first) out.push_back(',');
    first = false;
  };
  for (const TraceTrack& track : tracks) {
    const int d = track.device;
    separator();
    fmt::format_to(it, "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":", d);
    append_quoted(out, track.label);
    fmt::format_to(it, "}}}},{{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":{},\"tid\":0,\"args\":{{\"sort_index\":{}}}}}", d, d);
    for (Stream stream : {Stream::compute, Stream::communication, Stream::host, Stream::pcie})
      fmt::format_to(it, ",{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":\"{}\"}}}}", d,
                     static_cast<int>(stream), name(stream));
  }
  // SimResult's events are by device: each track's are one run of them.
  std::vector<std::pair<std::size_t, std::size_t>> runs(result.devices.size(), {0, 0});
  for (std::size_t i = 0; i < result.events.size(); ++i) {
    const auto d = static_cast<std::size_t>(result.events[i].device);
    if (d >= runs.size()) continue;
    if (runs[d].first == runs[d].second) runs[d].first = i;
    runs[d].second = i + 1;
  }
  for (const TraceTrack& track : tracks) {
    const auto source = static_cast<std::size_t>(track.source);
    if (source >= runs.size()) continue;
    for (std::size_t i = runs[source].first; i < runs[source].second; ++i) {
      const Event& e = result.events[i];
      separator();
      fmt::format_to(it, "{{\"name\":");
      append_quoted(out, e.name);
      fmt::format_to(it, ",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":{},\"tid\":{},\"args\":{{\"kind\":\"{}\",\"instruction\":{}",
                     name(e.kind), e.start * 1e6, (e.end - e.start) * 1e6, track.device, static_cast<int>(e.stream),
                     name(e.kind), e.instruction);
      if (e.kind == EventKind::collective || e.kind == EventKind::send || e.kind == EventKind::recv)
        fmt::format_to(it, ",\"bytes\":{}", bytes_moved(exec, e));
      fmt::format_to(it, "}}}}");
    }
  }
  fmt::format_to(it, "]}}\n");
  return fmt::to_string(out);
}

std::string chrome_trace_json(const exec::ExecPlan& exec, const SimResult& result) {
  return chrome_trace_json(exec, result, class_tracks(exec, result));
}

std::string chrome_trace_json(const exec::FoldedStep& folded, const SimResult& result) {
  return chrome_trace_json(folded.step, result);
}

}  // namespace loom::sim
