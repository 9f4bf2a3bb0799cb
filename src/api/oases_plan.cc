// The Oases planner on a job (oases_plan.h): slices priced in full, the chain solved exactly
// (search/oases_planner.h), the choice planned in full.
#include "loom/api/oases_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <ranges>

#include "loom/api/search_facts.h"
#include "loom/core/both_cores.h"
#include "loom/cost/memory_model.h"
#include "loom/policy/layer_degrees.h"
#include "loom/search/oases_planner.h"
#include "stage_clock.h"

namespace loom::api {
namespace {

// A predicted gain below this fraction of the uniform step is within the slices' additivity error.
constexpr double kNoise = 0.005;

// What the planner reads of one slice: its step and the largest peak of its devices.
struct SliceResult {
  double seconds = 0;
  std::int64_t peak = 0;
};

// --policy oases is megatron with Oases' overlap and, unless degrees are given, the planner.
JobOptions resolved_oases_policy(JobOptions o) {
  if (o.policy != "oases") return o;
  o.policy = "megatron";
  if (o.overlap == policy::Overlap::none) o.overlap = policy::Overlap::oases;
  if (o.tp_layers.empty()) o.tp_layers = "auto";
  return o;
}

// The job at `layers` layers with these degrees, planned unfolded (a mixed plan does not fold).
JobOptions slice_options(JobOptions options, int layers, const std::vector<int>& degrees) {
  options.layers = layers;
  options.tp_layers = policy::to_string(policy::runs_of(degrees));
  options.fold = Fold::off;
  return options;
}

Expected<SliceResult> price_slice(const JobOptions& base, int layers, const std::vector<int>& degrees) {
  LOOM_ASSIGN_OR_RETURN(const std::unique_ptr<Job> job, plan_job(slice_options(base, layers, degrees)));
  return SliceResult{job->metrics.step_time, peak_bytes(*job)};
}

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// Whether the policy takes a layer at degree t: its T/t copies must divide the batch as the group's
// degree does (dp x micro-batches x copies, and Oases' two sub-batches). The policy stage alone decides
// it (tens of ms); a degree it refuses is one whose slices fail, out of the space.
bool policy_takes(const JobOptions& base, int t) {
  Expected<std::unique_ptr<Job>> job = load_job(slice_options(base, 1, {t}));
  return job && apply_policy(**job).has_value();
}

// The slices, both cores at once: for each degree, one layer (index d), then each pair (a, b) of two
// layers (index D + a D + b).
std::vector<Expected<SliceResult>> price_slices(const JobOptions& base, const std::vector<int>& degrees) {
  const std::size_t n = degrees.size();
  std::vector<Expected<SliceResult>> out(n + n * n, Expected<SliceResult>(fail("not priced")));
  for_each_on_both_cores(out.size(), [&](std::size_t i) {
    out[i] = i < n ? price_slice(base, 1, {degrees[i]})
                   : price_slice(base, 2, {degrees[(i - n) / n], degrees[(i - n) % n]});
  });
  return out;
}

}  // namespace

bool uses_oases_planner(const JobOptions& options) {
  const JobOptions o = resolved_oases_policy(options);
  return o.tp_layers == "auto";
}

Expected<OasesLayerChoice> oases_layer_degrees(const JobOptions& requested) {
  JobOptions base = resolved_oases_policy(requested);
  OasesLayerChoice out;
  base.tp_layers.clear();
  if (base.policy != "megatron")
    return fail(fmt::format("--tp-layers auto runs the Oases planner on the policy megatron, not {}", base.policy),
                "use --policy megatron (or oases) with --tp-layers auto");
  if (plans_a_graph(base))
    return fail("the Oases planner prices slices of a preset's layers (--layers 1 and 2); a graph file keeps its depth",
                "plan a --model preset or an --arch family, or give the degrees: --tp-layers 2x8,4x16");
  LOOM_ASSIGN_OR_RETURN(const std::unique_ptr<Job> loaded, load_job(base));
  const policy::ParallelConfig& config = loaded->request.config;
  if (config.pp > 1)
    return fail(fmt::format("the Oases planner prices one pipeline stage, but pp is {}", config.pp),
                "plan with --pp 1 (Oases plans tensor parallelism without pipelines), or give the degrees");
  const int layers = count_layers(loaded->graph);
  if (layers == 0)
    return fail(fmt::format("'{}' has no numbered layers (op names like 'layers.3.attn') to give degrees to",
                            loaded->graph.name),
                "plan a model built of numbered layers");

  // The slices, and the degrees whose one-layer slice plans (a degree whose copies do not divide the batch
  // is out of the space); the group's own degree must.
  std::vector<int> degrees = divisors(config.tp);
  out.options = base;
  if (std::ranges::none_of(degrees, [&](int t) { return t != config.tp && policy_takes(base, t); })) {
    // Only the group's degree is in the space: its one assignment is the choice, and pricing slices
    // (planned in full on the whole mesh) could not change it. The plain plan, planned by the caller.
    out.spec = fmt::format("{}x{}", config.tp, layers);
    out.forced = true;
    out.space = 1;
    out.failed = static_cast<int>(degrees.size()) - 1;
    out.why = fmt::format("tp layers {}: the only degree the batch takes (the policy refuses the copies of every lower "
                          "degree: {}), so no slices were priced",
                          out.spec, fmt::join(degrees | std::views::take(degrees.size() - 1), ", "));
    return out;
  }
  const std::vector<Expected<SliceResult>> slices = price_slices(base, degrees);
  const std::size_t n = degrees.size();
  const std::size_t T = n - 1;  // the group's degree, the largest divisor
  if (!slices[T] || !slices[n + T * n + T])
    return std::unexpected(with_context((slices[T] ? slices[n + T * n + T] : slices[T]).error(),
                                        fmt::format("oases planner: a slice at tp {}", config.tp)));
  std::vector<std::size_t> kept{T};  // indices into `degrees` of the degrees in the space
  for (std::size_t d = 0; d < T; ++d) {
    bool ok = slices[d] && slices[n + d * n + d];
    for (std::size_t e : kept) ok = ok && slices[n + d * n + e] && slices[n + e * n + d];
    if (ok) kept.push_back(d);
    else ++out.failed;
  }
  std::ranges::sort(kept);
  const auto one = [&](std::size_t d) { return *slices[d]; };
  const auto two = [&](std::size_t a, std::size_t b) { return *slices[n + a * n + b]; };

  search::OasesRequest request;
  const double outside = 2 * one(T).seconds - two(T, T).seconds;  // E: the ops outside the layers
  request.base = outside;
  request.memory_limit = loaded->cluster.gpu.memory_bytes;
  std::vector<std::int64_t> layer_bytes;
  for (std::size_t d : kept) {
    request.degrees.push_back(degrees[d]);
    layer_bytes.push_back(two(d, d).peak - one(d).peak);
    request.base_bytes = std::max(request.base_bytes, one(d).peak - layer_bytes.back());
  }
  std::vector<double> node;
  for (std::size_t d : kept) node.push_back(one(d).seconds - outside);
  std::vector<std::vector<double>> reshard;
  for (std::size_t a : kept) {
    reshard.emplace_back();
    for (std::size_t b : kept) reshard.back().push_back(two(a, b).seconds - one(a).seconds - one(b).seconds + outside);
  }
  request.node.assign(static_cast<std::size_t>(layers), node);
  request.bytes.assign(static_cast<std::size_t>(layers), layer_bytes);
  request.reshard.assign(static_cast<std::size_t>(layers - 1), reshard);

  const StageClock solve_clock;
  LOOM_ASSIGN_OR_RETURN(const search::OasesChoice choice,
                        with_context(search::solve_oases(request), fmt::format("tp group {}", config.tp)));
  const double solve_seconds = solve_clock.seconds();
  const std::vector<int> uniform_choice(static_cast<std::size_t>(layers), static_cast<int>(kept.size() - 1));
  LOOM_ASSIGN_OR_RETURN(const search::OasesChoice uniform, search::evaluate_oases(request, uniform_choice));

  // A gain inside the slices' additivity error keeps the group's own degree: a mixed plan that the
  // model prices 0.01 % faster is noise, and costs a reshard per boundary if the model is off.
  const bool near_tie = uniform.bytes <= request.memory_limit && choice.seconds > uniform.seconds * (1 - kNoise);
  const search::OasesChoice& kept_choice = near_tie ? uniform : choice;
  std::vector<int> chosen;
  for (int d : kept_choice.choice) chosen.push_back(request.degrees[static_cast<std::size_t>(d)]);
  std::vector<int> optimum;
  for (int d : choice.choice) optimum.push_back(request.degrees[static_cast<std::size_t>(d)]);
  out.spec = policy::to_string(policy::runs_of(chosen));
  // The group's degree throughout is the plain plan (folded where it is large), as without the planner.
  out.uniform = std::ranges::all_of(chosen, [&](int t) { return t == config.tp; });
  if (!out.uniform) out.options.tp_layers = out.spec;
  out.seconds = kept_choice.seconds;
  out.bytes = kept_choice.bytes;
  out.fits = kept_choice.bytes <= request.memory_limit;
  out.space = std::pow(static_cast<double>(kept.size()), layers);
  out.states = choice.states;
  out.slices = static_cast<int>(slices.size());
  // Per degree, what one more layer adds inside a run of that degree: D(t, t) - A(t).
  std::string terms;
  for (std::size_t d = 0; d < request.degrees.size(); ++d)
    terms += fmt::format("{}tp {} {:.4f} s {}", d ? ", " : "", request.degrees[d], node[d] + reshard[d][d],
                         cost::format_bytes(static_cast<double>(layer_bytes[d])));
  std::string boundaries;
  for (std::size_t a = 0; a < request.degrees.size(); ++a)
    for (std::size_t b = 0; b < request.degrees.size(); ++b)
      if (a != b)
        boundaries += fmt::format("{}{}->{} {:+.4f} s", boundaries.empty() ? "" : ", ", request.degrees[a],
                                  request.degrees[b], reshard[a][b] - (reshard[a][a] + reshard[b][b]) / 2);
  out.why = fmt::format("tp layers {} predicted {:.4f} s a step against {:.4f} s at uniform tp {} ({:+.2f}%{}), "
                        "{} of {} per device{}; solved exactly in {:.2f} ms ({} Pareto states) from {} slices; one "
                        "more layer costs {}; a boundary between degrees {}{}",
                        out.spec, kept_choice.seconds, uniform.seconds, config.tp,
                        100 * (kept_choice.seconds / uniform.seconds - 1),
                        uniform.bytes > request.memory_limit ? ", which does not fit" : "",
                        cost::format_bytes(static_cast<double>(kept_choice.bytes)),
                        cost::format_bytes(static_cast<double>(request.memory_limit)),
                        near_tie && optimum != chosen
                            ? fmt::format(" (the optimum {} gains {:.3f}%, inside the slices' {:.1f}% noise: kept tp {})",
                                          policy::to_string(policy::runs_of(optimum)),
                                          100 * (1 - choice.seconds / uniform.seconds), 100 * kNoise, config.tp)
                            : std::string(),
                        1e3 * solve_seconds, choice.states, slices.size(), terms, boundaries.empty() ? "-" : "",
                        boundaries);
  return out;
}

Expected<std::unique_ptr<Job>> oases_plan(const JobOptions& requested, std::optional<SearchSummary>* summary) {
  const StageClock clock;
  const JobOptions base = resolved_oases_policy(requested);
  if (base.tp_layers != "auto") return plan_job(base);
  LOOM_ASSIGN_OR_RETURN(const OasesLayerChoice chosen, oases_layer_degrees(base));
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Job> job, with_context(plan_job(chosen.options),
                                                               fmt::format("the planner's choice --tp-layers {}", chosen.spec)));
  job->description += " (oases planner)";
  if (chosen.forced && job->metrics.out_of_memory())
    return fail(fmt::format("oases planner: no choice of degrees fits in {} per device; {}, needs {}",
                            cost::format_bytes(static_cast<double>(job->cluster.gpu.memory_bytes)), chosen.why,
                            cost::format_bytes(static_cast<double>(peak_bytes(*job)))),
                "use more GPUs per tp group, recomputation, or a smaller batch");
  if (summary != nullptr) {
    SearchSummary s{.baseline = "oases planner",
                    .candidates = chosen.space > INT_MAX ? INT_MAX : static_cast<int>(chosen.space),
                    .evaluated = 1,
                    .failed = chosen.failed,
                    .priced = static_cast<int>(std::min<std::int64_t>(chosen.states, INT_MAX)),
                    .slices = chosen.slices};
    FinalistRow row{.configuration = fmt::format("tp layers {}", chosen.spec),
                    .family = "megatron",
                    .rank = 1,
                    .analytic_seconds = chosen.seconds,
                    .analytic_peak = chosen.bytes,
                    .analytic_fits = chosen.fits};
    fill_full(row, *job);
    s.finalists.push_back(std::move(row));
    s.winner = 0;
    s.why = chosen.why;
    s.seconds = clock.seconds();
    *summary = std::move(s);
  }
  return job;
}

}  // namespace loom::api
