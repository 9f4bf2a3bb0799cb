#include "loom/api/stage_costs.h"

#include <algorithm>

#include "loom/cost/compute_model.h"
#include "loom/exec/instruction_buffers.h"
#include "loom/exec/materialize.h"
#include "loom/sim/durations.h"

namespace loom::api {

bool balances_stages(const policy::ParallelConfig& config) {
  // 3F1B stages each pass by whole layers (its chunks are the passes).
  return config.pp > 1 && config.virtual_stages == 1 && config.schedule != plan::ScheduleKind::three_f_one_b;
}

namespace {

// The forward op an op belongs to (itself, or the forward op a backward op mirrors; invalid for the
// optimizer's).
ir::OpId forward_owner(const ir::Graph& graph, ir::OpId op) {
  if (!op.valid()) return {};
  const ir::Op& o = graph.op(op);
  return o.pass == ir::Pass::forward ? op : o.is_mirror() ? o.mirror_of : ir::OpId{};
}

bool is_state(ir::TensorRole role) {
  return role == ir::TensorRole::parameter || role == ir::TensorRole::gradient ||
         role == ir::TensorRole::optimizer_state;
}

}  // namespace

policy::OpBytes op_bytes(const exec::ExecPlan& exec, std::int64_t device_bytes) {
  const ir::Graph& graph = *exec.plan->graph;
  const std::vector<ir::OpId> producer = ir::producers(graph);
  const std::vector<std::vector<ir::OpId>> readers = ir::consumers(graph);
  const auto& program = exec.programs[0];
  policy::OpBytes bytes{.held = std::vector<std::int64_t>(graph.ops.size(), 0),
                        .state = std::vector<std::int64_t>(graph.ops.size(), 0),
                        .working = std::vector<std::int64_t>(graph.ops.size(), 0),
                        .device = device_bytes};
  const auto role = [&](exec::BufferId b) { return graph.tensor(exec.buffer(b).piece.tensor).role; };
  // The first micro-batch's forward: up to the first backward compute or recomputation.
  std::size_t boundary = program.size();
  std::vector<char> computed(exec.plan->sub_ops.size(), 0);
  for (std::size_t i = 0; i < program.size() && boundary == program.size(); ++i)
    if (const auto* c = std::get_if<exec::Compute>(&program[i])) {
      if (exec.plan->op_of(c->sub_op).pass != ir::Pass::forward || computed[c->sub_op.index()] != 0) boundary = i;
      computed[c->sub_op.index()] = 1;
    }
  std::vector<char> live(exec.buffers.size(), 0);
  const auto owner_of = [&](exec::BufferId b) {
    return forward_owner(graph, producer[exec.buffer(b).piece.tensor.index()]);
  };
  for (std::size_t i = 0; i < boundary; ++i) {
    exec::for_each_written(program[i], [&](exec::BufferId b) {
      if (live[b.index()] == 0 && role(b) == ir::TensorRole::activation)
        if (const ir::OpId op = owner_of(b); op.valid()) bytes.working[op.index()] += exec.buffer(b).bytes;
      live[b.index()] = 1;
    });
    if (const auto* free = std::get_if<exec::Free>(&program[i])) live[free->buffer.index()] = 0;
  }
  for (std::size_t b = 0; b < live.size(); ++b) {
    const exec::BufferId id{static_cast<std::uint32_t>(b)};
    if (live[b] == 0 || (role(id) != ir::TensorRole::activation && role(id) != ir::TensorRole::input)) continue;
    if (const ir::OpId op = owner_of(id); op.valid()) bytes.held[op.index()] += exec.buffer(id).bytes;
  }
  // The model state where it is largest: the step after which the live state buffers weigh most.
  const auto replay = [&](std::size_t steps, std::vector<char>& alive) {
    std::int64_t total = 0, most = 0;
    std::size_t at = 0;
    for (std::size_t i = 0; i < steps; ++i) {
      const auto change = [&](exec::BufferId b, bool now) {
        if (!b.valid() || !is_state(role(b)) || alive[b.index()] == static_cast<char>(now)) return;
        alive[b.index()] = static_cast<char>(now);
        total += now ? exec.buffer(b).bytes : -exec.buffer(b).bytes;
      };
      exec::for_each_written(program[i], [&](exec::BufferId b) { change(b, true); });
      if (const auto* free = std::get_if<exec::Free>(&program[i])) change(free->buffer, false);
      if (total > most) most = total, at = i + 1;
    }
    return at;
  };
  std::vector<char> alive(exec.buffers.size(), 0);
  const std::size_t largest = replay(program.size(), alive);
  std::ranges::fill(alive, 0);
  replay(largest, alive);
  for (std::size_t b = 0; b < alive.size(); ++b) {
    if (alive[b] == 0) continue;
    const exec::Buffer& buffer = exec.buffer(exec::BufferId{static_cast<std::uint32_t>(b)});
    ir::TensorId t = buffer.piece.tensor;
    while (graph.tensor(t).updates.valid()) t = graph.tensor(t).updates;
    if (graph.tensor(t).role != ir::TensorRole::parameter && graph.tensor(t).owner.valid()) t = graph.tensor(t).owner;
    while (graph.tensor(t).updates.valid()) t = graph.tensor(t).updates;
    if (graph.tensor(t).role != ir::TensorRole::parameter) continue;  // an activation's gradient
    for (ir::OpId reader : readers[t.index()])
      if (graph.op(reader).pass == ir::Pass::forward) {
        bytes.state[reader.index()] += buffer.bytes;
        break;
      }
  }
  return bytes;
}

Expected<std::vector<double>> forward_op_seconds(const Job& job, const policy::ParallelConfig& config) {
  LOOM_ASSIGN_OR_RETURN(ForwardOpCosts costs, forward_op_costs(job, config));
  return std::move(costs.seconds);
}

Expected<ForwardOpCosts> forward_op_costs(const Job& job, const policy::ParallelConfig& config) {
  policy::ParallelConfig one_stage = config;
  one_stage.dp = one_stage.pp = one_stage.virtual_stages = 1;
  // Each op priced at the shape one device runs it at, one micro-batch of one replica (the compute model's
  // efficiency falls with an instance's size): a folded graph is that already; otherwise the batch is
  // split into dp x micro-batches run one after another on the one device.
  one_stage.micro_batches = job.folded ? (job.slice_keeps_replicas ? config.dp : 1) : config.dp * config.micro_batches;
  one_stage.schedule = plan::ScheduleKind::one_f_one_b;
  one_stage.zero = 0;                         // places optimizer state only
  one_stage.overlap = policy::Overlap::none;  // reorders, does not change compute
  one_stage.op_seconds.clear();
  LOOM_ASSIGN_OR_RETURN(plan::Plan plan, plan::make_plan(job.graph, job.catalog));
  // The interlaced pipeline needs pp > 1; its staged layers are megatron's, priced as such.
  const std::string pricing = job.options.policy == "interlaced" ? std::string("megatron") : job.options.policy;
  LOOM_RETURN_IF_ERROR(policy::apply_policy(plan, pricing, one_stage, job.catalog));
  // Materialized, so device 0's program holds what it computes: recomputed forwards run again, and the
  // sums of partial outputs (coshard's parts, micro-batches' gradients) are adds of their own.
  exec::MaterializeOptions options;
  options.cluster = job.layout_cluster;
  options.use_layout_search = job.options.layout_search;
  if (job.options.shrink) options.cost_model = exec::bandwidth_only_cost(job.layout_cluster);
  LOOM_ASSIGN_OR_RETURN(const exec::Materialized made, exec::materialize(plan, one_stage.tp, options));
  LOOM_ASSIGN_OR_RETURN(const cost::ComputeModel compute,
                        cost::ComputeModel::make(plan, job.catalog, job.cluster.gpu,
                                                 job.profile ? &*job.profile : nullptr));
  LOOM_ASSIGN_OR_RETURN(const sim::Durations durations, sim::model_durations(made.exec, compute, job.cluster));
  const ir::Graph& graph = job.graph;
  const std::vector<ir::OpId> producer = ir::producers(graph);
  std::vector<double> seconds(graph.ops.size(), 0.0);
  const auto add = [&](ir::OpId op, double s) {
    if (const ir::OpId owner = forward_owner(graph, op); owner.valid()) seconds[owner.index()] += s;
  };
  for (const exec::Instruction& instruction : made.exec.programs[0]) {
    if (const auto* c = std::get_if<exec::Compute>(&instruction)) {
      const plan::SubOp& sub_op = plan.sub_op(c->sub_op);
      add(sub_op.op, durations.compute(sub_op, 0));
    } else if (const auto* local = std::get_if<exec::Local>(&instruction); local && durations.local) {
      const exec::Buffer& out = made.exec.buffer(local->output);
      add(producer[out.piece.tensor.index()], durations.local(*local, out.bytes));
    }
  }
  return ForwardOpCosts{.seconds = std::move(seconds), .bytes = op_bytes(made.exec, job.cluster.gpu.memory_bytes)};
}

}  // namespace loom::api
