#include "loom/exec/passes.h"

namespace loom::exec {

ExecPassStats run_exec_passes(ExecPlan& exec, const ExecPassOptions& options) {
  ExecPassStats stats;
  if (options.exchanges_to_all_reduce) stats.exchanges = exchange_to_all_reduce(exec);
  const ExecPassStats buckets = bucket_gradients(exec, options);
  stats.buckets = buckets.buckets;
  stats.bucketed_reductions = buckets.bucketed_reductions;
  const ExecPassStats prefetched = prefetch_gathers(exec, options);
  stats.prefetches = prefetched.prefetches;
  stats.prefetched_gathers = prefetched.prefetched_gathers;
  if (options.overlap_collectives) stats.overlapped = overlap_collectives(exec);
  if (options.offload != Offload::none) {
    const ExecPassStats offloaded = offload_to_host(exec, options.offload);
    stats.host_steps = offloaded.host_steps;
    stats.host_copies = offloaded.host_copies;
  }
  return stats;
}

ExecPassStats run_exec_passes(FoldedStep& folded, const ExecPassOptions& options) {
  return bucket_gradients(folded, options);
}

}  // namespace loom::exec
