#include "loom/api/stage_costs.h"

#include "loom/cost/compute_model.h"
#include "loom/plan/recompute.h"

namespace loom::api {

bool balances_stages(const policy::ParallelConfig& config) { return config.pp > 1 && config.virtual_stages == 1; }

Expected<std::vector<double>> forward_op_seconds(const Job& job, const policy::ParallelConfig& config) {
  policy::ParallelConfig one_stage = config;
  one_stage.dp = one_stage.pp = one_stage.virtual_stages = 1;
  // Each op priced at the shape one device runs it at, one micro-batch of one replica (the compute model's
  // efficiency falls with an instance's size): a folded graph is that already; otherwise the batch is
  // split into dp x micro-batches run one after another on the one device.
  one_stage.micro_batches = job.folded ? 1 : config.dp * config.micro_batches;
  one_stage.schedule = plan::ScheduleKind::one_f_one_b;
  one_stage.zero = 0;                              // places optimizer state only
  one_stage.overlap = policy::Overlap::none;       // reorders, does not change compute
  one_stage.op_seconds.clear();
  LOOM_ASSIGN_OR_RETURN(plan::Plan plan, plan::make_plan(job.graph, job.catalog));
  LOOM_RETURN_IF_ERROR(policy::apply_policy(plan, job.options.policy, one_stage, job.catalog));
  LOOM_ASSIGN_OR_RETURN(const cost::ComputeModel compute,
                        cost::ComputeModel::make(plan, job.catalog, job.cluster.gpu,
                                                 job.profile ? &*job.profile : nullptr));
  std::vector<double> seconds(job.graph.ops.size(), 0.0);
  for (const plan::SubOp& sub_op : plan.sub_ops) {
    if (!sub_op.live || sub_op.device != 0) continue;
    const ir::Op& op = job.graph.ops[sub_op.op.index()];
    const double s = compute.seconds(sub_op.id);
    if (op.pass == ir::Pass::forward) seconds[op.id.index()] += plan::is_recomputed(plan, sub_op.id) ? 2 * s : s;
    else if (op.is_mirror()) seconds[op.mirror_of.index()] += s;
  }
  return seconds;
}

}  // namespace loom::api
