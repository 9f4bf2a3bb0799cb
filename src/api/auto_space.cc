// auto's space of a loaded job (auto_search.h): its facts, and the constraint file narrowing it.
#include <fmt/format.h>

#include <map>

#include "loom/api/auto_search.h"
#include "loom/api/search_facts.h"
#include "loom/plan/batch.h"
#include "loom/policy/tensor_parallel.h"

namespace loom::api {
namespace {

// Whether Megatron's tp candidates of degree `tp` take sequence parallelism: yes, unless the policy
// refuses it where it accepts tp alone (a model where no op carries a sequence, such as Swin's images, or
// a sequence tp does not divide). Decided from the two layouts, not from the refusal's text; where tp
// alone is refused too, sp stays on and the candidate fails as it would anyway.
bool takes_sequence_parallel(const plan::Plan& fresh, int tp) {
  return policy::tensor_parallel_layout(fresh, tp, true).has_value() ||
         !policy::tensor_parallel_layout(fresh, tp, false).has_value();
}

// How the policies let the model's micro-batches be cut (plan::batch_coupling; the Composer refuses the rest).
search::MicroBatching micro_batching(const plan::Plan& fresh) {
  const plan::BatchCoupling coupling = plan::batch_coupling(fresh);
  if (coupling.batch_sum) return search::MicroBatching::whole_batch;
  return coupling.whole_batch_readers.empty() ? search::MicroBatching::independent
                                              : search::MicroBatching::forwards_first;
}

}  // namespace

Expected<search::SpaceFacts> space_facts(const Job& loaded) {
  LOOM_ASSIGN_OR_RETURN(const plan::Plan fresh, plan::make_plan(loaded.graph, loaded.catalog));
  std::map<int, bool> sp;
  for (int tp : {2, 4, 8}) sp[tp] = takes_sequence_parallel(fresh, tp);
  return search::SpaceFacts{
      .gpus = loaded.request.gpus,
      .gpus_per_node = loaded.cluster.gpus_per_node,
      .global_batch = std::max<std::int64_t>(1, static_cast<std::int64_t>(loaded.workload.samples_per_step)),
      .layers = count_layers(loaded.graph),
      .sequence_parallel = [sp](int tp) { return sp.contains(tp) && sp.at(tp); },
      .micro_batching = micro_batching(fresh)};
}

Expected<std::optional<search::ConstraintChecker>> job_constraints(const Job& loaded) {
  if (loaded.options.constraints.empty()) return std::nullopt;
  LOOM_ASSIGN_OR_RETURN(search::PlanConstraints constraints, search::read_plan_constraints(loaded.options.constraints));
  return search::ConstraintChecker::bind(std::move(constraints), loaded.graph, loaded.catalog, loaded.request.gpus);
}

Expected<std::vector<search::Candidate>> constrain_space(const Job& loaded, std::vector<search::Candidate> candidates,
                                                         std::string_view space) {
  LOOM_ASSIGN_OR_RETURN(std::optional<search::ConstraintChecker> checker, job_constraints(loaded));
  if (!checker) return candidates;
  return checker->restrict(candidates, space, loaded.options.offload);
}

Expected<BaselineResult> with_space(Expected<BaselineResult> result, int space) {
  if (result && !result->best->options.constraints.empty()) {
    result->summary.constraints = result->best->options.constraints;
    result->summary.space = space;
  }
  return result;
}

}  // namespace loom::api
