#include "loom/api/verify_job.h"

#include "loom/verify/exec_interpreter.h"

namespace loom::api {

Expected<VerifyReport> verify_job(const Job& job, std::uint64_t seed) {
  if (job.stage < Stage::materialized) return fail("verifying needs a materialized job", "run materialize(job) first");
  if (job.folded)
    return fail("verifying runs every device's program, but this job is folded (one micro-batch of one replica)",
                "verify with --fold off, or verify the slice's degrees");
  const std::vector<verify::NdArray> initial = verify::initial_values(job.graph, seed);
  LOOM_ASSIGN_OR_RETURN(const std::vector<verify::NdArray> reference,
                        with_context(verify::run_graph(job.graph, initial), "single-device run"));
  LOOM_ASSIGN_OR_RETURN(verify::ExecRun run, with_context(verify::run_exec_plan(job.exec, initial), "running the ExecPlan"));
  VerifyReport report;
  LOOM_ASSIGN_OR_RETURN(report.comparison, verify::compare_runs(job.graph, reference, run.values));
  LOOM_ASSIGN_OR_RETURN(report.closed, with_context(verify::check_closed_step(job.exec, run, reference), "closing the step"));
  return report;
}

}  // namespace loom::api
