// write_plan_files (job.h): the report files of a simulated job.
#include <filesystem>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "loom/api/job.h"
#include "loom/exec/exec_json.h"
#include "loom/plan/plan_json.h"
#include "loom/sim/chrome_trace.h"
#include "loom/sim/html_report.h"

namespace loom::api {

Expected<void> add_plan_files(const Job& job, const std::string& dir, OutputSet& set) {
  if (job.stage != Stage::simulated) return fail("the plan files need a simulated job", "run simulate(job) first");
  const sim::ReportLabels labels{.model = job.options.model.empty() ? job.graph.name : job.options.model,
                                 .cluster = job.cluster.name,
                                 .policy = job.description};
  LOOM_ASSIGN_OR_RETURN(const std::vector<sim::TraceTrack> tracks,
                        with_context(sim::trace_tracks(step_programs(job), job.sim, job.options.trace_devices),
                                     "option --trace-devices"));
  // plan.json (its execution order completed over every sub-op: a large step's slowest file) on the second
  // core while the others are made; the texts, and their order in the set, are the serial ones.
  std::string plan_json, exec_json, trace_json, report;
  {
    const std::jthread second([&] { plan_json = plan::plan_to_json(job.plan); });
    exec_json = job.folded ? exec::exec_to_json(job.slice, &job.step.shape) : exec::exec_to_json(job.exec);
    trace_json = sim::chrome_trace_json(step_programs(job), job.sim, tracks);
    report = job.folded ? sim::html_report(labels, job.step, job.sim, job.metrics, job.memory)
                        : sim::html_report(labels, job.exec, job.sim, job.metrics, job.memory);
  }
  set.add(dir, "plan.json", std::move(plan_json), "plan.json");
  set.add(dir, "exec.json", std::move(exec_json), "exec.json");
  set.add(dir, "trace.json", std::move(trace_json), "trace.json");
  set.add(dir, "report.html", std::move(report), "report.html");
  return {};
}

Expected<std::vector<std::string>> write_plan_files(const Job& job, const std::string& dir) {
  OutputSet set;
  LOOM_RETURN_IF_ERROR(add_plan_files(job, dir, set));
  return set.commit();
}

}  // namespace loom::api
