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
  if (name.ends_with("overhead") || name.ends_with("alpha")) return fmt::format("{:.1f} us", value * 1e6);
  if (name.ends_with("beta")) return fmt::format("{:.3f} GB/s", value / 1e9);
  return fmt::format("{:.3f}", value);
}

std::string constants_line(const CalibrationReport& r) {
  std::string out;
  for (std::size_t k = 0; k < r.constant_names.size(); ++k) {
    const std::string source = k < r.constant_sources.size() && !r.constant_sources[k].empty()
                                   ? fmt::format(" ({})", r.constant_sources[k])
                                   : "";
    out += fmt::format("{}{} {}{}", k ? ", " : "", r.constant_names[k], constant_text(r.constant_names[k], r.fit.values[k]),
                       source);
  }
  return out;
}

// The constants the fit moved (neither measured apart nor fixed).
std::size_t free_constants(const CalibrationReport& r) {
  std::size_t n = 0;
  for (std::size_t k = 0; k < r.constant_names.size(); ++k) n += k >= r.constant_sources.size() || r.constant_sources[k].empty();
  return n;
}

// The load averages the rounds started at, over every plan: "min-max".
std::string load_range(const CalibrationReport& r) {
  double low = 0, high = 0;
  bool any = false;
  for (const PlanRow& p : r.plans)
    for (double l : p.load) {
      low = any ? std::min(low, l) : l;
      high = any ? std::max(high, l) : l;
      any = true;
    }
  return any ? fmt::format("{:.2f}-{:.2f}", low, high) : "not recorded";
}

std::string measuring_line(const CalibrationReport& r) {
  const std::string group = r.group_nice ? fmt::format(" (its session's group {})", *r.group_nice) : "";
  return fmt::format("{} round{} of {} steps per plan, niceness {}{}, 1-minute load average {} at the rounds' starts",
                     r.rounds, r.rounds == 1 ? "" : "s", r.steps, r.nice, group, load_range(r));
}

std::string milliseconds(const std::vector<double>& seconds) {
  std::string out;
  for (std::size_t i = 0; i < seconds.size(); ++i) out += fmt::format("{}{:.1f}", i ? " " : "", seconds[i] * 1e3);
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
  out += fmt::format("measured   {}\n", measuring_line(r));
  out += fmt::format("fit        {} (rms log error {:.3f}, {} evaluations)\n", constants_line(r), r.fit.rms_log_error,
                     r.fit.evaluations);
  if (r.plans.size() - s.held_out < free_constants(r))
    out += fmt::format("note       fitted on {} plans, fewer than the {} constants: some are not determined\n",
                       r.plans.size() - s.held_out, free_constants(r));
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
  nlohmann::json sources = nlohmann::json::object();
  for (std::size_t k = 0; k < r.constant_names.size(); ++k) {
    constants[r.constant_names[k]] = r.fit.values[k];
    if (k < r.constant_sources.size() && !r.constant_sources[k].empty()) sources[r.constant_names[k]] = r.constant_sources[k];
  }
  nlohmann::json plans = nlohmann::json::array();
  for (const PlanRow& p : r.plans)
    plans.push_back({{"name", p.name}, {"flags", p.flags}, {"processes", p.processes}, {"fitted", p.fitted},
                     {"measured_s", p.measured_s}, {"round_s", p.round_steps}, {"load", p.load},
                     {"predicted_s", p.predicted_s}, {"error", p.error()},
                     {"peak_bytes_measured", p.peak_measured}, {"peak_bytes_predicted", p.peak_predicted},
                     {"peak_error", p.peak_error()}});
  return {{"schema", "loom.calibrate/1"},
          {"cluster", r.cluster.name},
          {"cores", r.cluster.shared.cores},
          {"steps", r.steps},
          {"rounds", r.rounds},
          {"nice", r.nice},
          {"profile", r.profile},
          {"fit", {{"constants", constants}, {"not_fitted", sources}, {"links_world", r.links_world}, {"rms_log_error", r.fit.rms_log_error}, {"evaluations", r.fit.evaluations}}},
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
rank, one torch thread each), `--repeats R` rounds (3) of every plan, each round `--steps N` steps (5).
A round's step is the median of its steps after the first (each step the slowest rank's): the first builds
every op's form, and the median drops a step another process stalled. A plan's step is its fastest round's:
load from other processes only adds time, so the least disturbed round is the closest to the idle machine
the model describes (a round runs every plan once, so a burst of load falls on one round of several plans,
not on every round of one). Run it as `flock /tmp/loom-build.lock nice -n -19 loom calibrate ...` on a
shared machine: the ranks inherit the priority, and no build runs beside them. Where Linux groups the
scheduling by session (autogroup), a niceness orders processes only inside their session, so a measurer
started with a negative niceness gives its session's group the same while it measures (as root) and
restores it after (python/loom_profile/priority.py: the plan runner, the op timer of `loom profile` and the
link timer all do). The report gives both and the load averages the rounds started at. Each run's
results.json also keeps, per round and rank, the seconds each kind of instruction took (where the time went).

After the plans, it measures each kind of communication apart among as many processes as the machine has
cores (`python -m loom_profile.cluster`'s timer; `--no-links` skips it): gloo's all-reduce, all-gather (into a
list of pieces, as the runtime calls it), reduce-scatter (`reduce_scatter_tensor`) and a send, at 4 KiB to
8 MiB, each fitted to the simulator's price of that kind. Gloo runs each kind by its own algorithm, so their
rates differ several times over loopback; one α-β for all, fitted on whole steps, underpriced the ZeRO plans
(their reduce-scatters) and could not be told apart from the other constants.

It then fits the cost model's remaining constants on some plans (`--fit K`, spread over the set) and predicts
the others with the simulator, whose op times come from the profile database of this machine
(`data/profiles/cpu-host.json`, made with `loom profile` at the measuring priority, one thread, each op alone):

- `time_scale`: factor on every op time of the database (the runtime's ops against the timer's);
- `instruction_overhead`: seconds every instruction adds (the runtime's Python dispatch, autograd's engine);
- `core_sharing` γ: W processes on C cores compute `1 + γ·max(0, W − C)/C` times slower (γ = 1: fully
  shared), W the processes computing at once as a computing process sees them, `∫n² dt / ∫n dt` over the
  simulated step (include/loom/sim/shared_cores.h): a pipeline's stage waiting for its input takes no core,
  so a 4-stage pipeline on 2 cores shares them less than 4 data-parallel ranks do;
- `comm_sharing`: communication's γ: collectives and transfers take `1 + γ·max(0, W − C)/C` times their
  price (over loopback a collective's copies and sums, and each hop's wake-up, run on the shared cores);
- `collective_overhead`: seconds every collective adds to its link's price: the runtime's work around the
  call (ordering the members, copying the input, assembling the pieces) and gloo's threads waking from a
  compute, which the links' back-to-back calls do not pay (a ZeRO step runs 56 to 200 collectives);
- measured, not fitted (marked so in the report): `alpha`, `beta` (the all-reduce's link, latency per ring
  hop and bandwidth), `p2p_alpha`, `p2p_beta` (a send, `L + p2p_alpha + bytes / p2p_beta`),
  `all_gather_alpha`, `all_gather_beta`, `reduce_scatter_alpha`, `reduce_scatter_beta` (one ring pass, `L +
  (n−1)·α + (n−1)/n·S/β`, S the whole). Without the measurement (`--no-links`, an older measured.json), the
  all-reduce's and the send's α-β are fitted on the plans and the others take the all-reduce's.

`--fix NAME=VALUE,...` pins constants, so the fit moves only the others (a fixed value replaces a measured one).

Each fitted constant is bounded by what is physical (src/cli/calibration_model.cc): `time_scale` 1/3 to 3,
`instruction_overhead` 1 to 200 µs, γ 0.1 to 1.5, latencies 10 µs (a loopback round trip) to 5 ms (a
scheduler's time slice), bandwidths 0.1 to 20 GB/s (a memory copy's rate at most), `comm_sharing` 0.02 to 2,
`collective_overhead` 1 µs to 5 ms.

They are cluster fields (`shared_cores`, docs/clusters.md, and the links), so the fitted cluster file
(`--out DIR` writes DIR/cluster.yaml) predicts the same with `loom plan --cluster DIR/cluster.yaml --profile
data/profiles/cpu-host.json`. The fit minimises the squared log ratio of predicted to measured step
(Levenberg-Marquardt, include/loom/cost/calibration.h).

Peak memory: the runtime counts the bytes of the buffers its instructions return (each storage once) from
the instruction to the buffer's `del`, in the first step (python/loom/runtime/memory.py), as the memory model counts them
(include/loom/cost/memory_model.h); the interpreter, torch, gloo's buffers and the allocator's cache are in
neither. A recomputed plan's first forward no longer outlives the plan's `del`: the runtime's fused-attention
cache (python/loom/runtime/forms/attention.py) kept each forward's q, k, v and output until its backward,
which for a recomputed forward never comes (the backward reads the recomputation's), so the first forward's
attention inputs stayed alive: 62.5 MiB measured against 55.5 MiB modelled for `gpt-1-recompute` in the first
step, growing every step; it now holds them weakly and drops the entry with them.

## The last run

)";
  out += fmt::format("Measured: {}. Profile `{}`; {} plans fitted, {} held out.\n\n", measuring_line(r), r.profile,
                     r.plans.size() - s.held_out, s.held_out);
  out += fmt::format("Fitted constants: {}; rms log error of the fit {:.3f}.\n\n", constants_line(r), r.fit.rms_log_error);
  out += fmt::format("**Held out ({} plans): median |error| {:.1f} %, Spearman {:.3f}.** Fitted plans: median |error| "
                     "{:.1f} %. Peak memory, model vs runtime, every rank of every plan: worst |error| {:.1f} %, "
                     "median {:.1f} %.\n\n",
                     s.held_out, s.median_abs_error * 100, s.spearman, s.fit_median_abs_error * 100,
                     s.peak_max_abs_error * 100, s.peak_median_abs_error * 100);
  out += "| plan | processes | set | rounds ms | measured ms | predicted ms | error | peak MiB per rank (runtime) | "
         "model MiB | worst peak error |\n";
  out += "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const PlanRow& p : r.plans)
    out += fmt::format("| {} | {} | {} | {} | {:.2f} | {:.2f} | {:+.1f} % | {} | {} | {:+.1f} % |\n", p.name,
                       p.processes, p.fitted ? "fit" : "held out", milliseconds(p.round_steps), p.measured_s * 1e3,
                       p.predicted_s * 1e3, p.error() * 100, peaks(p.peak_measured), peaks(p.peak_predicted),
                       p.peak_error() * 100);
  out += "\nThe plans' flags (`loom plan` flags; `--plans FILE` takes a file of `NAME FLAGS...` lines):\n\n";
  for (const PlanRow& p : r.plans) out += fmt::format("- `{}`: `{}`\n", p.name, p.flags);
  out += "\nThe fitted cluster file:\n\n```yaml\n" + cluster::cluster_to_yaml(r.cluster) + "```\n";
  return out;
}

}  // namespace loom::cli
