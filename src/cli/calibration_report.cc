#include "calibration_report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "loom/cluster/cluster_file.h"
#include "loom/search/rank_correlation.h"

namespace loom::cli {
namespace {

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// A constant in its unit: seconds as µs, bandwidth as GB/s.
std::string constant_text(const std::string& name, double value) {
  if (name == "instruction_overhead" || name == "alpha") return fmt::format("{:.1f} us", value * 1e6);
  if (name == "beta") return fmt::format("{:.3f} GB/s", value / 1e9);
  return fmt::format("{:.3f}", value);
}

std::string constants_line(const CalibrationReport& r) {
  std::string out;
  for (std::size_t k = 0; k < r.constant_names.size(); ++k)
    out += fmt::format("{}{} {}", k ? ", " : "", r.constant_names[k], constant_text(r.constant_names[k], r.fit.values[k]));
  return out;
}

std::string peaks(const std::vector<std::int64_t>& bytes) {
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); ++i) out += fmt::format("{}{:.1f}", i ? " " : "", mib(bytes[i]));
  return out;
}

}  // namespace

double PlanRow::peak_error() const {
  double worst = 0;
  for (std::size_t i = 0; i < peak_measured.size() && i < peak_predicted.size(); ++i) {
    if (peak_measured[i] <= 0) continue;
    const double e = cost::relative_error(static_cast<double>(peak_predicted[i]), static_cast<double>(peak_measured[i]));
    if (std::abs(e) > std::abs(worst)) worst = e;
  }
  return worst;
}

CalibrationSummary summarize(const CalibrationReport& report) {
  CalibrationSummary s;
  std::vector<double> held_abs, fit_abs, measured, predicted, peak_abs;
  for (const PlanRow& p : report.plans) {
    (p.fitted ? fit_abs : held_abs).push_back(std::abs(p.error()));
    if (!p.fitted) {
      measured.push_back(p.measured_s);
      predicted.push_back(p.predicted_s);
    }
    peak_abs.push_back(std::abs(p.peak_error()));
  }
  s.held_out = held_abs.size();
  s.median_abs_error = cost::median(held_abs);
  s.fit_median_abs_error = cost::median(fit_abs);
  s.spearman = search::spearman(measured, predicted);
  s.peak_max_abs_error = peak_abs.empty() ? 0 : *std::max_element(peak_abs.begin(), peak_abs.end());
  s.peak_median_abs_error = cost::median(peak_abs);
  return s;
}

std::string calibration_text(const CalibrationReport& r) {
  const CalibrationSummary s = summarize(r);
  std::string out = fmt::format("{:<20} {:>5} {:<8} {:>12} {:>12} {:>8}  {:>10} {:>10} {:>8}\n", "plan", "procs", "set",
                                "measured ms", "predicted ms", "error", "peak MiB", "model MiB", "error");
  for (const PlanRow& p : r.plans)
    out += fmt::format("{:<20} {:>5} {:<8} {:>12.2f} {:>12.2f} {:>+7.1f}%  {:>10.2f} {:>10.2f} {:>+7.1f}%\n", p.name,
                       p.processes, p.fitted ? "fit" : "held-out", p.measured_s * 1e3, p.predicted_s * 1e3,
                       p.error() * 100, mib(*std::max_element(p.peak_measured.begin(), p.peak_measured.end())),
                       mib(*std::max_element(p.peak_predicted.begin(), p.peak_predicted.end())), p.peak_error() * 100);
  out += fmt::format("fit        {} (rms log error {:.3f}, {} evaluations)\n", constants_line(r), r.fit.rms_log_error,
                     r.fit.evaluations);
  if (r.plans.size() - s.held_out < r.constant_names.size())
    out += fmt::format("note       fitted on {} plans, fewer than the {} constants: some are not determined\n",
                       r.plans.size() - s.held_out, r.constant_names.size());
  out += fmt::format("held out   {} plans: median |error| {:.1f} %, Spearman {:.3f} (fitted plans: median |error| {:.1f} %)\n",
                     s.held_out, s.median_abs_error * 100, s.spearman, s.fit_median_abs_error * 100);
  out += fmt::format("memory     peak per rank, model vs runtime: worst |error| {:.1f} %, median {:.1f} %\n",
                     s.peak_max_abs_error * 100, s.peak_median_abs_error * 100);
  for (const std::string& f : r.files) out += fmt::format("wrote      {}\n", f);
  return out;
}

nlohmann::json calibration_json(const CalibrationReport& r) {
  const CalibrationSummary s = summarize(r);
  nlohmann::json constants = nlohmann::json::object();
  for (std::size_t k = 0; k < r.constant_names.size(); ++k) constants[r.constant_names[k]] = r.fit.values[k];
  nlohmann::json plans = nlohmann::json::array();
  for (const PlanRow& p : r.plans)
    plans.push_back({{"name", p.name}, {"flags", p.flags}, {"processes", p.processes}, {"fitted", p.fitted},
                     {"measured_s", p.measured_s}, {"predicted_s", p.predicted_s}, {"error", p.error()},
                     {"peak_bytes_measured", p.peak_measured}, {"peak_bytes_predicted", p.peak_predicted},
                     {"peak_error", p.peak_error()}});
  return {{"schema", "loom.calibrate/1"},
          {"cluster", r.cluster.name},
          {"cores", r.cluster.shared.cores},
          {"steps", r.steps},
          {"profile", r.profile},
          {"fit", {{"constants", constants}, {"rms_log_error", r.fit.rms_log_error}, {"evaluations", r.fit.evaluations}}},
          {"plans", plans},
          {"held_out", {{"plans", s.held_out}, {"median_abs_error", s.median_abs_error}, {"spearman", s.spearman}}},
          {"fitted", {{"median_abs_error", s.fit_median_abs_error}}},
          {"peak_memory", {{"max_abs_error", s.peak_max_abs_error}, {"median_abs_error", s.peak_median_abs_error}}},
          {"files", r.files}};
}

std::string calibration_markdown(const CalibrationReport& r) {
  const CalibrationSummary s = summarize(r);
  std::string out = R"(# Calibration: the cost model fitted on real runs of this machine

Written by `loom calibrate --doc docs/calibration.md` (src/cli/calibrate_command.cc); do not edit by hand.

`loom calibrate` plans a set of small GPT-2 and LLaMA configurations (dp, tp, pp, ZeRO 1-3, recomputation; 1 to
4 processes) on the CPU cluster `cpu-host` (src/cluster/presets.cc: this machine's socket as the "GPU", gloo
over loopback as the link), emits each plan's rank programs (`loom plan --emit`), runs them with the runtime
(`python -m loom_profile.plan_runs`, the launcher of `python -m loom.runtime.launch`: gloo, one process per
rank, one torch thread each), and takes the median of the steps after the first, each step the slowest
rank's. It then fits the cost model's free constants on some plans (`--fit K`, spread over the set) and
predicts the others with the simulator, whose op times come from the profile database of this machine
(`data/profiles/cpu-host.json`, made with `loom profile`, one thread, each op alone):

- `time_scale`: factor on every op time of the database (the runtime's ops against the timer's);
- `instruction_overhead`: seconds every instruction adds (the runtime's Python dispatch, autograd's engine);
- `core_sharing` γ: W processes on C cores compute `1 + γ·max(0, W − C)/C` times slower (γ = 1: fully
  shared); the ranks' sharing of this machine's cores is modelled, not hidden;
- `alpha`, `beta`: the gloo link's latency and bandwidth (α-β, as `python -m loom_profile.cluster` fits
  them on all-reduces alone; here they are fitted on whole steps).

They are cluster fields (`shared_cores`, docs/clusters.md, and the links), so the fitted cluster file
(`--out DIR` writes DIR/cluster.yaml) predicts the same with `loom plan --cluster DIR/cluster.yaml --profile
data/profiles/cpu-host.json`. The fit minimises the squared log ratio of predicted to measured step
(Levenberg-Marquardt, include/loom/cost/calibration.h).

Peak memory: the runtime counts the bytes of the buffers its instructions return (each storage once) from
the instruction to the buffer's `del`, in the first step (python/loom/runtime/memory.py), as the memory model counts them
(include/loom/cost/memory_model.h); the interpreter, torch, gloo's buffers and the allocator's cache are in
neither.

## The last run

)";
  out += fmt::format("{} steps per plan; profile `{}`; {} plans fitted, {} held out.\n\n", r.steps, r.profile,
                     r.plans.size() - s.held_out, s.held_out);
  out += fmt::format("Fitted constants: {}; rms log error of the fit {:.3f}.\n\n", constants_line(r), r.fit.rms_log_error);
  out += fmt::format("**Held out ({} plans): median |error| {:.1f} %, Spearman {:.3f}.** Fitted plans: median |error| "
                     "{:.1f} %. Peak memory, model vs runtime, every rank of every plan: worst |error| {:.1f} %, "
                     "median {:.1f} %.\n\n",
                     s.held_out, s.median_abs_error * 100, s.spearman, s.fit_median_abs_error * 100,
                     s.peak_max_abs_error * 100, s.peak_median_abs_error * 100);
  out += "| plan | processes | set | measured ms | predicted ms | error | peak MiB per rank (runtime) | model MiB | worst peak error |\n";
  out += "|---|---|---|---|---|---|---|---|---|\n";
  for (const PlanRow& p : r.plans)
    out += fmt::format("| {} | {} | {} | {:.2f} | {:.2f} | {:+.1f} % | {} | {} | {:+.1f} % |\n", p.name, p.processes,
                       p.fitted ? "fit" : "held out", p.measured_s * 1e3, p.predicted_s * 1e3, p.error() * 100,
                       peaks(p.peak_measured), peaks(p.peak_predicted), p.peak_error() * 100);
  out += "\nThe plans' flags (`loom plan` flags; `--plans FILE` takes a file of `NAME FLAGS...` lines):\n\n";
  for (const PlanRow& p : r.plans) out += fmt::format("- `{}`: `{}`\n", p.name, p.flags);
  out += "\nThe fitted cluster file:\n\n```yaml\n" + cluster::cluster_to_yaml(r.cluster) + "```\n";
  return out;
}

}  // namespace loom::cli
