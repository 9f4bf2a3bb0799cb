#include "loom/api/stage_costs.h"

#include "loom/cost/compute_model.h"
#include "loom/exec/materialize.h"
#include "loom/sim/durations.h"

namespace loom::api {

bool balances_stages(const policy::ParallelConfig& config) {
  // 3F1B stages each pass by whole layers (its chunks are the passes).
  return config.pp > 1 && config.virtual_stages == 1 && config.schedule != plan::ScheduleKind::three_f_one_b;
}

Expected<std::vector<double>> forward_op_seconds(const Job& job, const policy::ParallelConfig& config) {
  policy::ParallelConfig one_stage = config;
  one_stage.dp = one_stage.pp = one_stage.virtual_stages = 1;
  // Each op priced at the shape one device runs it at, one micro-batch of one replica (the compute model's
  // efficiency falls with an instance's size): a folded graph is that already; otherwise the batch is
  // split into dp x micro-batches run one after another on the one device.
  one_stage.micro_batches = job.folded ? 1 : config.dp * config.micro_batches;
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
  // The forward op a forward or backward op belongs to (invalid for the optimizer's).
  const auto owner = [&](ir::OpId op) {
    const ir::Op& o = graph.op(op);
    return o.pass == ir::Pass::forward ? op : o.is_mirror() ? o.mirror_of : ir::OpId{};
  };
  const auto add = [&](ir::OpId op, double s) {
    if (op.valid() && owner(op).valid()) seconds[owner(op).index()] += s;
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
  return seconds;
}

}  // namespace loom::api
