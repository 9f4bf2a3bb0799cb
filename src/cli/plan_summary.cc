#include "plan_summary.h"

#include <algorithm>

#include <fmt/format.h>

#include "loom/cost/memory_model.h"
#include "loom/api/memory_advice.h"
#include "loom/sim/summary_json.h"
#include "loom/sim/summary_table.h"

namespace loom::cli {
namespace {

std::string seconds_text(double s) { return sim::format_seconds(s); }

std::string count_text(double x) {
  if (x >= 1e12) return fmt::format("{:.2f}T", x / 1e12);
  if (x >= 1e9) return fmt::format("{:.2f}B", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.2f}M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f}k", x / 1e3);
  return fmt::format("{:.1f}", x);
}

// The weights' dtype: the option a preset was built with, a traced graph's own (its first parameter's).
ir::DType weight_dtype(const api::Job& r) {
  if (!api::plans_a_graph(r.options)) return r.request.model_options.dtype;
  for (const ir::FullTensor& t : r.graph.tensors)
    if (t.role == ir::TensorRole::parameter) return t.dtype;
  return r.request.model_options.dtype;
}

}  // namespace

std::string passes_line(const exec::ExecPassStats& p) {
  std::string line = fmt::format("passes     {} exchanges made all-reduces; {} gradient all-reduces in {} asynchronous "
                                 "buckets; {} parameter all-gathers prefetched in {} starts",
                                 p.exchanges, p.bucketed_reductions, p.buckets, p.prefetched_gathers, p.prefetches);
  if (p.overlapped > 0) line += fmt::format("; {} activation all-reduces overlapped (start/wait)", p.overlapped);
  return line + "\n";
}

std::string plan_summary(const api::Job& r) {
  const sim::StepMetrics& m = r.metrics;
  std::string out;
  const std::string& model = !r.options.model.empty() ? r.options.model
                              : !r.options.graph_file.empty() ? r.options.graph_file : r.graph.name;
  const std::string attention = r.options.attention == models::AttentionImpl::fused
                                    ? std::string()
                                    : fmt::format(", {} attention", models::name(r.options.attention));
  out += fmt::format("model      {}: {} parameters, {} ops, batch {} ({}, {}{})\n", model,
                     count_text(static_cast<double>(r.stats.parameter_count)), r.graph.ops.size(),
                     r.graph.inputs.empty() ? 0 : r.graph.tensor(r.graph.inputs.front()).shape[0],
                     ir::name(weight_dtype(r)), ir::name(r.request.optimizer.kind), attention);
  out += fmt::format("cluster    {}: {} x {} {}\n", r.cluster.name, r.cluster.nodes, r.cluster.gpus_per_node,
                     r.cluster.gpu.name);
  const exec::ExecPlan& step = r.folded ? r.step.step : r.exec;
  out += fmt::format("policy     {} on {} GPUs\n", r.description, step.num_devices);
  std::size_t instructions = 0;
  for (const auto& program : step.programs) instructions += program.size();
  std::vector<std::string> collectives;
  for (const auto& [name, count] : r.materialize_stats.collectives) collectives.push_back(fmt::format("{} {}", name, count));
  out += fmt::format("plan       {} sub-ops; {} instructions in {} device classes; {}; {} sends\n",
                     r.plan.live_sub_ops().size(), instructions, step.representatives.size(),
                     collectives.empty() ? "no collectives" : fmt::format("{}", fmt::join(collectives, ", ")),
                     r.materialize_stats.sends);
  if (r.passes != exec::ExecPassStats{}) out += passes_line(r.passes);
  if (r.folded && r.slice_keeps_replicas)  // ZeRO: the shards and their collectives are among the replicas
    out += fmt::format("folded     the plan is one micro-batch of every replica on {} devices (dp {} x tp {} x pp {}: ZeRO's "
                       "shards and collectives are among the replicas), repeated over {} micro-batches; --fold off "
                       "plans every sub-op\n",
                       r.slice_devices, r.request.config.dp, r.request.config.tp, r.request.config.pp,
                       r.request.config.micro_batches);
  else if (r.folded)
    out += fmt::format("folded     the plan is one micro-batch of one replica on {} devices (tp x pp), repeated over {} "
                       "micro-batches and mirrored over dp {}; --fold off plans every sub-op\n",
                       r.slice_devices, r.request.config.micro_batches, r.request.config.dp);
  out += sim::summary_table({.model = model, .cluster = r.cluster.name, .policy = r.description}, r.sim, m);
  if (m.max_memory_device >= 0) {
    const sim::DeviceMetrics& d = m.per_device[static_cast<std::size_t>(m.max_memory_device)];
    out += fmt::format("memory at peak (device {}): {}\n", d.device, d.at_peak.to_string());
  }
  if (m.out_of_memory()) {
    out += fmt::format("OOM        {} of {} devices exceed {}:\n", m.out_of_memory_devices, m.per_device.size(),
                       cost::format_bytes(static_cast<double>(m.memory_capacity)));
    int shown = 0;
    for (const auto& d : m.per_device) {
      if (!d.out_of_memory || ++shown > 8) continue;
      out += fmt::format("           device {}: {} ({})\n", d.device, cost::format_bytes(static_cast<double>(d.peak_bytes)),
                         d.at_peak.to_string());
    }
    if (shown > 8) out += fmt::format("           ... and {} more\n", shown - 8);
  }
  const api::StageSeconds& s = r.seconds;
  out += fmt::format("planned in {} (build {}, policy {}, materialize {}, simulate {})\n", seconds_text(s.total),
                     seconds_text(s.build), seconds_text(s.policy), seconds_text(s.materialize), seconds_text(s.simulate));
  return out;
}

std::string ranked_table(const std::vector<const api::Job*>& jobs) {
  std::vector<const api::Job*> ranked = jobs;
  std::stable_sort(ranked.begin(), ranked.end(), [](const api::Job* a, const api::Job* b) {
    if (a->metrics.out_of_memory() != b->metrics.out_of_memory()) return !a->metrics.out_of_memory();
    return a->metrics.step_time < b->metrics.step_time;
  });
  std::string out = fmt::format("{:>4}  {:<52} {:>11} {:>12} {:>7} {:>11}  {}\n", "rank", "plan", "step", "samples/s",
                                "MFU", "peak mem", "fits");
  for (std::size_t i = 0; i < ranked.size(); ++i) {
    const sim::StepMetrics& m = ranked[i]->metrics;
    const double peak = m.max_memory_device >= 0
                            ? static_cast<double>(m.per_device[static_cast<std::size_t>(m.max_memory_device)].peak_bytes)
                            : 0;
    out += fmt::format("{:>4}  {:<52} {:>11} {:>12} {:>6.1f}% {:>11}  {}\n", i + 1, ranked[i]->description,
                       seconds_text(m.step_time), count_text(m.samples_per_second), 100 * m.mfu,
                       cost::format_bytes(peak), m.out_of_memory() ? "OOM" : "yes");
  }
  return out;
}

namespace {

// A field's value as a JSON value of its kind (docs/json.md: numbers are numbers, not strings).
nlohmann::ordered_json typed(const api::OptionField& f, const std::string& text) {
  switch (f.kind) {
    case api::ValueKind::whole: return std::stoll(text);
    case api::ValueKind::real: return std::stod(text);
    case api::ValueKind::flag: return text == "true";
    case api::ValueKind::text: return text;
  }
  return text;
}

}  // namespace

std::string search_summary(const api::SearchSummary& search, bool explain) {
  std::string out = fmt::format(
      "search     {}: {}{} configurations{}, {} priced from {} measured slices, {} planned in full ({} not applicable{}), "
      "{:.1f} s{}\n",
      search.baseline, search.candidates, search.constraints.empty() ? "" : fmt::format(" of {}", search.space),
      search.constraints.empty() ? "" : fmt::format(" within {}", search.constraints), search.priced, search.slices,
      search.evaluated, search.failed,
      search.skipped > 0 ? fmt::format(", {} slow to plan skipped by the bound", search.skipped) : std::string(),
      search.seconds, search.budget_spent ? " (budget spent)" : "");
  if (!explain) return out;
  out += fmt::format("{:>4}  {:<64} {:>22}  {:>22}\n", "rank", "finalist (in planning order)", "analytic step, peak",
                     "full step, peak");
  for (std::size_t i = 0; i < search.finalists.size(); ++i) {
    const api::FinalistRow& r = search.finalists[i];
    const auto cell = [](double seconds, std::int64_t peak, bool fits) {
      return fmt::format("{:9.4f} s {:>10}{}", seconds, cost::format_bytes(static_cast<double>(peak)), fits ? " " : "!");
    };
    out += fmt::format("{:>4}  {:<64} {:>22}  {:>22}{}\n", r.rank, r.configuration,
                       cell(r.analytic_seconds, r.analytic_peak, r.analytic_fits),
                       r.planned ? cell(r.full_seconds, r.full_peak, r.full_fits) : std::string(r.skipped ? "skipped" : "failed"),
                       static_cast<int>(i) == search.winner ? "  <- chosen" : "");
    out += fmt::format("{:>6}analytic: pipeline {:.3f} s + dp/ZeRO sync {:.3f} s + optimizer {:.3f} s", "",
                       r.analytic_pipeline, r.analytic_sync, r.analytic_optimizer);
    if (r.planned)
      out += fmt::format("; full, busiest device: compute {:.3f} s + exposed comm {:.3f} s + idle {:.3f} s",
                         r.full_compute, r.full_exposed_communication, r.full_idle);
    out += "\n";
  }
  out += "      (! : does not fit in memory)\n";
  for (const api::FinalistRow& r : search.finalists)
    if (!r.planned) out += fmt::format("      {}: {}\n", r.configuration, r.error);
  out += fmt::format("why        {}\n", search.why);
  return out;
}

nlohmann::ordered_json plan_json(const api::Job& job, const std::optional<api::SearchSummary>& search) {
  using nlohmann::ordered_json;
  ordered_json options = ordered_json::object();
  const api::JobOptions defaults;
  for (const api::OptionField& f : api::option_fields())  // the fields given a value other than the default
    if (const std::string value = f.get(job.options); value != f.get(defaults))
      options[std::string(f.keyword)] = typed(f, value);
  const policy::ParallelConfig& c = job.request.config;
  ordered_json out = {{"schema", "loom.plan/1"},
                      {"description", job.description},
                      {"options", std::move(options)},
                      {"resolved",
                       {{"gpus", job.request.gpus},
                        {"dp", c.dp},
                        {"tp", c.tp},
                        {"pp", c.pp},
                        {"micro_batches", c.micro_batches},
                        {"global_batch", static_cast<std::int64_t>(job.workload.samples_per_step)},
                        {"interleave", c.virtual_stages},
                        {"block_order", std::string(plan::name(c.block_order))},
                        {"sequence_parallel", c.sequence_parallel},
                        {"zero", c.zero},
                        {"recompute", std::string(policy::name(c.recompute))},
                        {"overlap", std::string(policy::name(c.overlap))},
                        {"folded", job.folded}}},
                      {"parameters", job.stats.parameter_count}};
  if (search) {
    ordered_json finalists = ordered_json::array();
    for (const api::FinalistRow& r : search->finalists) {
      ordered_json row = {{"configuration", r.configuration},
                          {"family", r.family},
                          {"rank", r.rank},
                          {"analytic_step_seconds", r.analytic_seconds},
                          {"analytic_peak_bytes", r.analytic_peak},
                          {"analytic_fits", r.analytic_fits},
                          {"analytic_pipeline_seconds", r.analytic_pipeline},
                          {"analytic_sync_seconds", r.analytic_sync},
                          {"analytic_optimizer_seconds", r.analytic_optimizer},
                          {"planned", r.planned},
                          {"skipped", r.skipped}};
      if (r.planned) {
        row["step_seconds"] = r.full_seconds;
        row["peak_bytes"] = r.full_peak;
        row["fits"] = r.full_fits;
        row["compute_seconds"] = r.full_compute;
        row["exposed_communication_seconds"] = r.full_exposed_communication;
        row["idle_seconds"] = r.full_idle;
      } else {
        row["error"] = r.error;
      }
      finalists.push_back(std::move(row));
    }
    out["search"] = {{"baseline", search->baseline},
                     {"candidates", search->candidates},
                     {"constraints", search->constraints},
                     {"space", search->space},
                     {"priced", search->priced},
                     {"slices", search->slices},
                     {"evaluated", search->evaluated},
                     {"not_applicable", search->failed},
                     {"skipped", search->skipped},
                     {"seconds", search->seconds},
                     {"budget_spent", search->budget_spent},
                     {"finalists", std::move(finalists)},
                     {"winner", search->winner},
                     {"why", search->why}};
  }
  out["summary"] = sim::summary_json({.model = job.options.model.empty() ? job.graph.name : job.options.model,
                                      .cluster = job.cluster.name,
                                      .policy = job.description},
                                     job.sim, job.metrics);
  if (const std::string advice = api::memory_advice(job); !advice.empty()) out["memory_advice"] = advice;
  return out;
}

}  // namespace loom::cli
