#include "loom/exec/exec_json.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loom/exec/device_classes.h"
#include "loom/exec/exec_text.h"

namespace loom::exec {
namespace {

std::string quoted_json(std::string_view text) { return nlohmann::json(std::string(text)).dump(); }

std::string ids(const std::vector<BufferId>& buffers) {
  std::string out = "[";
  for (std::size_t i = 0; i < buffers.size(); ++i)
    out += fmt::format("{}{}", i ? ", " : "", buffers[i].valid() ? static_cast<long>(buffers[i].value) : -1L);
  return out + "]";
}

std::string instruction_json(const ExecPlan& exec, const Instruction& instruction) {
  const auto id = [](BufferId b) { return b.valid() ? static_cast<long>(b.value) : -1L; };
  return std::visit(
      [&](const auto& in) -> std::string {
        using T = std::decay_t<decltype(in)>;
        if constexpr (std::is_same_v<T, Compute>) {
          return fmt::format(R"({{"op": "compute", "sub_op": {}, "in": {}, "out": {}}})",
                             quoted_json(exec.plan->sub_op(in.sub_op).name), ids(in.inputs), ids(in.outputs));
        } else if constexpr (std::is_same_v<T, Load>) {
          return fmt::format(R"({{"op": "load", "out": {}}})", id(in.output));
        } else if constexpr (std::is_same_v<T, Collective>) {
          const auto tag = static_cast<std::size_t>(in.tag);
          const bool known = tag < exec.collectives.size() && exec.collectives[tag].tensor.valid();
          return fmt::format(R"({{"op": {}, "tag": {}, "group": [{}], "tensor": {}, "in": {}, "out": {}}})",
                             quoted_json(comm::name(in.kind)), in.tag, fmt::join(in.group, ", "),
                             known ? quoted_json(exec.plan->graph->tensor(exec.collectives[tag].tensor).name) : "null",
                             id(in.input), id(in.output));
        } else if constexpr (std::is_same_v<T, CollectiveStart>) {
          return fmt::format(R"({{"op": "start", "kind": {}, "tag": {}, "group": [{}], "in": {}, "out": {}}})",
                             quoted_json(comm::name(in.kind)), in.tag, fmt::join(in.group, ", "), ids(in.inputs),
                             ids(in.outputs));
        } else if constexpr (std::is_same_v<T, CollectiveWait>) {
          return fmt::format(R"({{"op": "wait", "tag": {}}})", in.tag);
        } else if constexpr (std::is_same_v<T, Send>) {
          return fmt::format(R"({{"op": "send", "peer": {}, "tag": {}, "buffer": {}}})", in.peer, in.tag, id(in.buffer));
        } else if constexpr (std::is_same_v<T, Recv>) {
          return fmt::format(R"({{"op": "recv", "peer": {}, "tag": {}, "buffer": {}}})", in.peer, in.tag, id(in.buffer));
        } else if constexpr (std::is_same_v<T, Local>) {
          return fmt::format(R"({{"op": {}, "in": {}, "out": {}}})", quoted_json(name(in.kind)), ids(in.inputs),
                             id(in.output));
        } else {
          return fmt::format(R"({{"op": "free", "buffer": {}}})", id(in.buffer));
        }
      },
      instruction);
}

std::string fold_json(const FoldShape& fold) {
  std::string out = fmt::format(R"({{"dp": {}, "tp": {}, "pp": {}, "chunks": {}, "micro_batches": {}, "sequences": [)",
                                fold.dp, fold.tp, fold.pp, fold.chunks, fold.micro_batches);
  for (std::size_t s = 0; s < fold.sequences.size(); ++s) {
    out += s ? ",\n   [" : "\n   [";
    for (std::size_t b = 0; b < fold.sequences[s].size(); ++b) {
      const plan::Block& block = fold.sequences[s][b];
      out += fmt::format(R"({}"{}{}.{}")", b ? ", " : "", plan::part_letter(block.part), block.stage,
                         block.micro_batch);
    }
    out += "]";
  }
  return out + "]}";
}

}  // namespace

std::string exec_to_json(const ExecPlan& exec, const FoldShape* fold) {
  DeviceClasses classes{exec.class_of, exec.representatives};
  if (classes.class_of.size() != static_cast<std::size_t>(exec.num_devices)) classes = device_classes(exec);
  std::vector<std::vector<int>> members(classes.representatives.size());
  for (std::size_t d = 0; d < classes.class_of.size(); ++d)
    members[static_cast<std::size_t>(classes.class_of[d])].push_back(static_cast<int>(d));

  std::string out = fmt::format(R"({{"format": "loom-exec", "version": 1, "devices": {},)", exec.num_devices);
  if (fold != nullptr) out += "\n \"fold\": " + fold_json(*fold) + ",";
  out += "\n \"classes\": [";
  for (std::size_t c = 0; c < members.size(); ++c)
    out += fmt::format(R"({}{{"representative": {}, "devices": [{}]}})", c ? ", " : "", classes.representatives[c],
                       fmt::join(members[c], ", "));
  out += "],\n \"programs\": [";
  std::vector<std::vector<std::size_t>> buffers_of(static_cast<std::size_t>(exec.num_devices));
  for (std::size_t b = 0; b < exec.buffers.size(); ++b)
    if (exec.buffers[b].device >= 0 && exec.buffers[b].device < exec.num_devices)
      buffers_of[static_cast<std::size_t>(exec.buffers[b].device)].push_back(b);
  for (std::size_t c = 0; c < classes.representatives.size(); ++c) {
    const int device = classes.representatives[c];
    const auto& program = exec.programs[static_cast<std::size_t>(device)];
    out += fmt::format(R"({}{{"device": {}, "buffers": [)", c ? ",\n  " : "\n  ", device);
    bool first = true;
    for (std::size_t b : buffers_of[static_cast<std::size_t>(device)]) {
      out += fmt::format(R"({}{{"id": {}, "piece": {}, "bytes": {}{}}})", first ? "\n    " : ",\n    ", b,
                         quoted_json(piece_to_text(exec, exec.buffers[b].piece)), exec.buffers[b].bytes,
                         exec.buffers[b].memory == Memory::host ? R"(, "memory": "host")" : "");
      first = false;
    }
    out += "],\n   \"instructions\": [";
    for (std::size_t i = 0; i < program.size(); ++i)
      out += (i ? ",\n    " : "\n    ") + instruction_json(exec, program[i]);
    out += "]}";
  }
  out += "]}\n";
  return out;
}

}  // namespace loom::exec
