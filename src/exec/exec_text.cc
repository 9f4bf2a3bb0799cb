#include "loom/exec/exec_text.h"

#include <map>

#include <fmt/format.h>

#include "loom/comm/layout.h"
#include "loom/core/strings.h"
#include "loom/exec/device_classes.h"

namespace loom::exec {
namespace {

std::string tensor_name(const ExecPlan& exec, ir::TensorId id) {
  const ir::Graph* graph = exec.plan != nullptr ? exec.plan->graph : nullptr;
  if (graph == nullptr || !id.valid() || id.index() >= graph->tensors.size()) return fmt::format("{}", id.value);
  return graph->tensor(id).name;
}

std::string buffers_to_text(const ExecPlan& exec, const std::vector<BufferId>& ids) {
  std::vector<std::string> parts;
  for (BufferId id : ids) parts.push_back(buffer_to_text(exec, id));
  return join(parts, ", ");
}

std::string compute_to_text(const ExecPlan& exec, const Compute& c) {
  const bool known = exec.plan != nullptr && c.sub_op.index() < exec.plan->sub_ops.size();
  const std::string name = known ? exec.plan->sub_op(c.sub_op).name : fmt::format("${}?", c.sub_op.value);
  return fmt::format("compute {}  {} -> {}", name, buffers_to_text(exec, c.inputs), buffers_to_text(exec, c.outputs));
}

std::string local_to_text(const ExecPlan& exec, const Local& l) {
  return fmt::format("{} {} -> {}", name(l.kind), buffers_to_text(exec, l.inputs), buffer_to_text(exec, l.output));
}

// Per device, what its program holds; devices of one class have equal counts.
struct Counts {
  int loads = 0, computes = 0, starts = 0, waits = 0, sends = 0, recvs = 0, locals = 0, frees = 0;
  std::map<std::string_view, int> collectives;  // by kind name, sorted for a stable text
  std::int64_t bytes_sent = 0;
};

Counts count(const ExecPlan& exec, int device) {
  Counts counts;
  for (const Instruction& instruction : exec.programs[static_cast<std::size_t>(device)]) {
    if (std::holds_alternative<Load>(instruction)) ++counts.loads;
    if (std::holds_alternative<Compute>(instruction)) ++counts.computes;
    if (std::holds_alternative<Recv>(instruction)) ++counts.recvs;
    if (std::holds_alternative<Local>(instruction)) ++counts.locals;
    if (std::holds_alternative<Free>(instruction)) ++counts.frees;
    if (const auto* c = std::get_if<Collective>(&instruction)) ++counts.collectives[comm::name(c->kind)];
    if (std::holds_alternative<CollectiveStart>(instruction)) ++counts.starts;
    if (std::holds_alternative<CollectiveWait>(instruction)) ++counts.waits;
    if (const auto* s = std::get_if<Send>(&instruction)) {
      ++counts.sends;
      if (s->buffer.index() < exec.buffers.size()) counts.bytes_sent += exec.buffer(s->buffer).bytes;
    }
  }
  return counts;
}

// "1 load", "2 loads"; `many` for irregular plurals.
std::string plural(int n, std::string_view one, std::string_view many = {}) {
  if (n == 1) return fmt::format("1 {}", one);
  return many.empty() ? fmt::format("{} {}s", n, one) : fmt::format("{} {}", n, many);
}

std::string counts_to_text(const Counts& c) {
  std::vector<std::string> parts;
  auto add = [&](int n, std::string_view noun) {
    if (n > 0) parts.push_back(plural(n, noun));
  };
  add(c.loads, "load");
  add(c.computes, "compute");
  for (const auto& [kind, n] : c.collectives) add(n, kind);
  add(c.starts, "start");
  add(c.waits, "wait");
  if (c.sends > 0) parts.push_back(fmt::format("{} ({})", plural(c.sends, "send"), human_bytes(static_cast<double>(c.bytes_sent))));
  add(c.recvs, "recv");
  add(c.locals, "local");
  add(c.frees, "free");
  return parts.empty() ? std::string("nothing") : join(parts, ", ");
}

}  // namespace

std::string piece_to_text(const ExecPlan& exec, const plan::SubTensor& piece) {
  std::vector<std::string> dims;
  for (const plan::IndexRange& r : piece.box) dims.push_back(r.to_string());
  std::string text = fmt::format("%{}[{}]", tensor_name(exec, piece.tensor), join(dims, ", "));
  if (!piece.value.is_whole()) text += fmt::format(" ({})", piece.value.to_string());
  return text;
}

std::string buffer_to_text(const ExecPlan& exec, BufferId id) {
  if (!id.valid()) return "-";
  if (id.index() >= exec.buffers.size()) return fmt::format("b{}?", id.value);
  const Buffer& b = exec.buffer(id);
  return fmt::format("b{}{} {}", id.value, b.memory == Memory::host ? " (host)" : "", piece_to_text(exec, b.piece));
}

namespace {

std::string label(const ExecPlan& exec, comm::Primitive kind, std::string_view what, std::int64_t tag,
                  const std::vector<int>& group) {
  std::string text = fmt::format("{}{} #{}", comm::name(kind), what, tag);
  if (tag >= 0 && static_cast<std::size_t>(tag) < exec.collectives.size()) {
    const ir::TensorId tensor = exec.collectives[static_cast<std::size_t>(tag)].tensor;
    if (tensor.valid()) text += fmt::format(" of '{}'", tensor_name(exec, tensor));
  }
  return text + fmt::format(" (group {})", comm::devices_to_string(group));
}

}  // namespace

std::string collective_label(const ExecPlan& exec, const Collective& collective) {
  return label(exec, collective.kind, "", collective.tag, collective.group);
}

std::string collective_label(const ExecPlan& exec, const CollectiveStart& start) {
  return label(exec, start.kind, " start", start.tag, start.group);
}

std::string instruction_to_text(const ExecPlan& exec, const Instruction& instruction) {
  struct Printer {
    const ExecPlan& exec;
    std::string operator()(const Compute& c) const { return compute_to_text(exec, c); }
    std::string operator()(const Load& l) const { return "load " + buffer_to_text(exec, l.output); }
    std::string operator()(const Collective& c) const {
      return fmt::format("{}  {} -> {}", collective_label(exec, c), buffer_to_text(exec, c.input),
                         buffer_to_text(exec, c.output));
    }
    std::string operator()(const CollectiveStart& c) const {
      return fmt::format("{}  {} -> {}", collective_label(exec, c), buffers_to_text(exec, c.inputs),
                         buffers_to_text(exec, c.outputs));
    }
    std::string operator()(const CollectiveWait& w) const { return fmt::format("wait #{}", w.tag); }
    std::string operator()(const Send& s) const {
      return fmt::format("send -> {} #{} {}", s.peer, s.tag, buffer_to_text(exec, s.buffer));
    }
    std::string operator()(const Recv& r) const {
      return fmt::format("recv <- {} #{} {}", r.peer, r.tag, buffer_to_text(exec, r.buffer));
    }
    std::string operator()(const Local& l) const { return local_to_text(exec, l); }
    std::string operator()(const Free& f) const { return fmt::format("free b{}", f.buffer.value); }
  };
  return std::visit(Printer{exec}, instruction);
}

std::string exec_to_text(const ExecPlan& exec, int device) {
  if (device < 0 || static_cast<std::size_t>(device) >= exec.programs.size())
    return fmt::format("(no device {}: the plan has {} programs)\n", device, exec.programs.size());
  std::string text;
  const auto& program = exec.programs[static_cast<std::size_t>(device)];
  for (std::size_t i = 0; i < program.size(); ++i)
    text += fmt::format("{}: {}\n", i, instruction_to_text(exec, program[i]));
  return text;
}

std::string exec_summary(const ExecPlan& exec) {
  const int devices = static_cast<int>(exec.programs.size());
  const DeviceClasses classes = device_classes(exec);
  const int n = static_cast<int>(classes.representatives.size());
  std::string text = fmt::format("{} in {}\n", plural(devices, "device"), plural(n, "class", "classes"));
  std::vector<std::vector<int>> members(static_cast<std::size_t>(n));
  for (int d = 0; d < devices; ++d) members[static_cast<std::size_t>(classes.class_of[static_cast<std::size_t>(d)])].push_back(d);
  for (int c = 0; c < n; ++c)
    text += fmt::format("class {} (devices {}): {}\n", c, comm::devices_to_string(members[static_cast<std::size_t>(c)]),
                        counts_to_text(count(exec, classes.representatives[static_cast<std::size_t>(c)])));
  return text;
}

}  // namespace loom::exec
