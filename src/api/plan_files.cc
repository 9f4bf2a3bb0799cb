// write_plan_files (job.h): the report files of a simulated job.
#include <filesystem>

#include <fmt/format.h>

#include "loom/api/job.h"
#include "loom/core/atomic_file.h"
#include "loom/exec/exec_json.h"
#include "loom/plan/plan_json.h"
#include "loom/sim/chrome_trace.h"
#include "loom/sim/html_report.h"

namespace loom::api {

Expected<std::vector<std::string>> write_plan_files(const Job& job, const std::string& dir) {
  if (job.stage != Stage::simulated) return fail("the plan files need a simulated job", "run simulate(job) first");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fail(fmt::format("cannot create output directory '{}': {}", dir, ec.message()));
  const sim::ReportLabels labels{.model = job.options.model.empty() ? job.graph.name : job.options.model,
                                 .cluster = job.cluster.name,
                                 .policy = job.description};
  LOOM_ASSIGN_OR_RETURN(const std::vector<sim::TraceTrack> tracks,
                        with_context(sim::trace_tracks(step_programs(job), job.sim, job.options.trace_devices),
                                     "option --trace-devices"));
  const std::vector<std::pair<std::string, std::string>> files = {
      {"plan.json", plan::plan_to_json(job.plan)},
      {"exec.json", job.folded ? exec::exec_to_json(job.slice, &job.step.shape) : exec::exec_to_json(job.exec)},
      {"trace.json", sim::chrome_trace_json(step_programs(job), job.sim, tracks)},
      {"report.html", job.folded ? sim::html_report(labels, job.step, job.sim, job.metrics, job.memory)
                                 : sim::html_report(labels, job.exec, job.sim, job.metrics, job.memory)},
  };
  std::vector<std::string> paths;
  for (const auto& [name, text] : files) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    LOOM_RETURN_IF_ERROR(write_file_atomically(path, text, name));
    paths.push_back(path);
  }
  return paths;
}

}  // namespace loom::api
