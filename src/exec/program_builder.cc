#include "program_builder.h"

namespace loom::exec::detail {

std::int64_t piece_bytes(const ir::Graph& graph, const plan::SubTensor& piece) {
  return piece.numel() * ir::size_bytes(graph.tensor(piece.tensor).dtype);
}

ProgramBuilder::ProgramBuilder(const plan::Plan& plan, int num_devices) {
  exec_.plan = &plan;
  exec_.num_devices = num_devices;
  exec_.programs.resize(static_cast<std::size_t>(num_devices));
}

BufferId ProgramBuilder::new_buffer(int device, plan::SubTensor piece) {
  const std::int64_t bytes = piece_bytes(*exec_.plan->graph, piece);
  return exec_.add_buffer(device, std::move(piece), bytes);
}

BufferId ProgramBuilder::load(int device, const plan::SubTensor& piece) {
  const BufferId b = new_buffer(device, piece);
  emit(device, Load{b});
  ++stats_.loads;
  return b;
}

void ProgramBuilder::compute(int device, Compute compute) { emit(device, std::move(compute)); }

BufferId ProgramBuilder::slice(BufferId from, std::vector<plan::IndexRange> box) {
  plan::SubTensor target = piece(from);
  for (auto& r : box) r = r.normalized();
  if (target.box == box) return from;
  target.box = std::move(box);
  const int at = device(from);
  const BufferId b = new_buffer(at, std::move(target));
  emit(at, Local{LocalKind::slice, {from}, b});
  return b;
}

BufferId ProgramBuilder::scale(BufferId from, plan::ValuePart value) {
  if (piece(from).value.count == value.count) return from;
  plan::SubTensor target = piece(from);
  target.value = value;
  const int at = device(from);
  const BufferId b = new_buffer(at, std::move(target));
  emit(at, Local{LocalKind::scale, {from}, b});
  return b;
}

BufferId ProgramBuilder::combine(int at, std::vector<BufferId> inputs, plan::SubTensor target) {
  // One input of the same box and value count already is the target: a value part's index only names
  // it within its decomposition (exec_plan.h).
  if (inputs.size() == 1 && piece(inputs[0]).box == target.box && piece(inputs[0]).value.count == target.value.count &&
      device(inputs[0]) == at)
    return inputs[0];
  const BufferId b = new_buffer(at, std::move(target));
  emit(at, Local{LocalKind::combine, std::move(inputs), b});
  return b;
}

BufferId ProgramBuilder::accumulate(int at, std::vector<BufferId> inputs, plan::SubTensor target) {
  const BufferId b = new_buffer(at, std::move(target));
  emit(at, Local{LocalKind::accumulate, std::move(inputs), b});
  return b;
}

BufferId ProgramBuilder::transfer(BufferId from, int to, const std::string& rule) {
  return receive(send(from, to, rule));
}

ProgramBuilder::PendingReceive ProgramBuilder::send(BufferId from, int to, const std::string& rule) {
  const int src = device(from);
  if (src == to) return {src, -1, from};
  const std::int64_t tag = next_tag(piece(from).tensor, rule, -1);
  const BufferId b = new_buffer(to, piece(from));
  emit(src, Send{to, tag, from});
  ++stats_.sends;
  stats_.bytes_sent += exec_.buffer(b).bytes;
  return {src, tag, b};
}

BufferId ProgramBuilder::receive(const PendingReceive& pending) {
  if (pending.tag >= 0) emit(device(pending.buffer), Recv{pending.from, pending.tag, pending.buffer});
  return pending.buffer;
}

std::vector<BufferId> ProgramBuilder::collective(comm::Primitive kind, std::span<const int> group,
                                                 std::span<const BufferId> inputs, std::span<const plan::SubTensor> outputs,
                                                 ir::TensorId tensor, const std::string& rule, std::int64_t step) {
  const std::int64_t tag = next_tag(tensor, rule, step);
  const std::vector<int> members(group.begin(), group.end());
  std::vector<BufferId> result;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const BufferId out = new_buffer(members[i], outputs[i]);
    emit(members[i], Collective{kind, members, tag, inputs[i], out});
    result.push_back(out);
  }
  ++stats_.collectives[std::string(comm::name(kind))];
  // Bytes each member sends under a ring (comm/step.h's convention).
  const auto n = static_cast<std::int64_t>(members.size());
  const std::int64_t in_bytes = exec_.buffer(inputs[0]).bytes, out_bytes = exec_.buffer(result[0]).bytes;
  const std::int64_t per_member = kind == comm::Primitive::all_reduce ? 2 * (n - 1) * in_bytes / n
                                  : kind == comm::Primitive::all_gather ? (n - 1) * out_bytes / n
                                                                        : (n - 1) * in_bytes / n;
  stats_.bytes_sent += per_member * n;
  return result;
}

std::int64_t ProgramBuilder::group_step(const std::vector<std::vector<int>>& groups) {
  return exec_.add_group_step(groups);
}

void ProgramBuilder::share_concurrent_steps() {
  concurrent_.share(exec_, [this](const std::vector<std::vector<int>>& groups) { return group_step(groups); });
}

std::int64_t ProgramBuilder::next_tag(ir::TensorId tensor, const std::string& rule, std::int64_t step) {
  return exec_.add_tag(CollectiveInfo{.tensor = tensor, .rule = rule, .paired = -1, .step = step});
}

Expected<std::vector<BufferId>> input_buffers(const plan::Plan& plan, const plan::SubOp& sub_op,
                                              const std::function<Expected<BufferId>(const plan::SubTensor&)>& need,
                                              std::string_view what) {
  const plan::OpLayout& layout = plan.layouts[sub_op.op.index()];
  std::vector<BufferId> buffers;
  for (std::size_t i = 0; i < sub_op.inputs.size(); ++i) {
    if (layout.shape_only(i)) {
      buffers.push_back(kNoBuffer);
      continue;
    }
    Expected<BufferId> input = need(sub_op.inputs[i]);
    if (!input) return std::unexpected(with_context(input.error(), fmt::format("input {} of {}", i, what)));
    buffers.push_back(*input);
  }
  return buffers;
}

}  // namespace loom::exec::detail
