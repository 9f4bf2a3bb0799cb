// How well the analytic costing (search/analytic_cost.h) ranks plans, against the full path (issue 15:
// "report the rank correlation"). Per job, auto's space is priced analytically (api::price_space), then a
// sample of the plannable candidates is planned in full (plan_job: materialize, check, simulate): the
// analytic top 8 and the rest of the ranking evenly spaced, LOOM_RANK_SAMPLE candidates in all (default
// 24; 0: every one, minutes). Printed per job: Spearman's rho and Kendall's tau-b of analytic against full
// step time over the sampled candidates that fit in full, the median and largest relative error of the
// analytic step and peak memory, how many the analytic model calls fitting that do not (and the reverse),
// and where the full optimum of the sample falls in the analytic ranking (the search plans the top few
// of each family, api/auto_search.h). Runs once (its repetitions fixed at 1 whatever `make bench` asks).
#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "loom/api/auto_search.h"
#include "loom/api/resolve_request.h"
#include "loom/search/rank_correlation.h"

namespace {

using namespace loom;

struct RankJob {
  const char* model;
  const char* cluster;
  std::int64_t global_batch;
};

constexpr RankJob kJobs[] = {
    {"gpt3-1.3b", "dgx-a100", 32},     {"gpt3-13b", "dgx-a100x4", 128}, {"gpt3-13b", "dgx-a100x8", 256},
    {"llama-7b", "dgx-a100x2", 64},    {"swin-1.8b", "dgx-a100", 32},   {"gpt3-125m", "dgx-a100", 16},
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::ranges::sort(v);
  return v[v.size() / 2];
}

void BM_AutoRank(benchmark::State& state) {
  const RankJob& job = kJobs[state.range(0)];
  const char* only = std::getenv("LOOM_RANK_JOB");  // a model name: only its jobs
  if (only != nullptr && std::string_view(only) != job.model) return state.SkipWithError("not LOOM_RANK_JOB");
  const char* env = std::getenv("LOOM_RANK_SAMPLE");
  const std::size_t sample = env != nullptr ? static_cast<std::size_t>(std::atoi(env)) : 24;
  for (auto _ : state) {
    api::JobOptions options;
    options.model = job.model;
    options.cluster = job.cluster;
    options.global_batch = job.global_batch;
    options.policy = "auto";
    if (std::string_view(job.model) == "gpt3-125m") options.layers = 4, options.seq = 256, options.gpus = 4;
    auto loaded = api::load_job(options);
    if (!loaded) return state.SkipWithError(loaded.error().to_string().c_str());
    auto space = api::price_space(**loaded);
    if (!space) return state.SkipWithError(space.error().to_string().c_str());
    // The plannable candidates in analytic rank order.
    std::vector<std::size_t> ranked;
    for (std::size_t i = 0; i < space->candidates.size(); ++i)
      if (space->estimates[i] && space->estimates[i]->plannable) ranked.push_back(i);
    std::ranges::stable_sort(ranked, [&](std::size_t a, std::size_t b) {
      return search::better(*space->estimates[a], *space->estimates[b]);
    });
    std::vector<std::size_t> picked;
    const std::size_t want = sample == 0 ? ranked.size() : std::min(sample, ranked.size());
    for (std::size_t r = 0; r < ranked.size() && r < std::min<std::size_t>(8, want); ++r) picked.push_back(r);
    const std::size_t rest = want - picked.size();
    for (std::size_t k = 0; k < rest; ++k)
      picked.push_back(8 + (k * (ranked.size() - 8)) / std::max<std::size_t>(1, rest));
    std::vector<double> analytic, full, step_error, peak_error;
    int false_fit = 0, false_oom = 0, planned = 0;
    double best_full = INFINITY;
    std::size_t best_rank = 0;
    fmt::print("\n{} on {} (global batch {}): {} candidates, {} plannable, {} planned in full\n", job.model,
               job.cluster, job.global_batch, space->candidates.size(), ranked.size(), picked.size());
    fmt::print("{:>5}  {:<66} {:>10} {:>10} {:>9} {:>9}\n", "rank", "candidate", "analytic s", "full s", "an. GiB",
               "full GiB");
    for (std::size_t r : picked) {
      const std::size_t i = ranked[r];
      const search::Candidate& c = space->candidates[i];
      const search::Estimate& e = *space->estimates[i];
      api::JobOptions o = api::with_config(options, c.config);
      o.policy = c.policy;
      auto result = api::plan_job(o);
      if (!result) {
        fmt::print("{:>5}  {:<66} failed: {}\n", r + 1, search::describe(c), result.error().message);
        continue;
      }
      ++planned;
      const sim::StepMetrics& m = (*result)->metrics;
      const double peak = static_cast<double>(m.per_device[static_cast<std::size_t>(m.max_memory_device)].peak_bytes);
      const bool fits = !m.out_of_memory();
      false_fit += e.fits && !fits;
      false_oom += !e.fits && fits;
      peak_error.push_back(std::abs(static_cast<double>(e.peak_bytes) - peak) / peak);
      fmt::print("{:>5}  {:<66} {:>10.4f} {:>10.4f} {:>9.2f} {:>9.2f}{}\n", r + 1, search::describe(c), e.step_seconds,
                 m.step_time, static_cast<double>(e.peak_bytes) / (1 << 30), peak / (1 << 30), fits ? "" : "  OOM");
      if (!fits) continue;
      analytic.push_back(e.step_seconds);
      full.push_back(m.step_time);
      step_error.push_back(std::abs(e.step_seconds - m.step_time) / m.step_time);
      if (m.step_time < best_full) best_full = m.step_time, best_rank = r + 1;
    }
    const double rho = search::spearman(analytic, full), tau = search::kendall_tau_b(analytic, full);
    fmt::print("spearman {:.3f}  kendall {:.3f}  over {} fitting; step error median {:.1f} % max {:.1f} %; peak error "
               "median {:.1f} % max {:.1f} %; analytic fits but OOM {}, analytic OOM but fits {}; full optimum at "
               "analytic rank {} ({} top {})\n",
               rho, tau, analytic.size(), 100 * median(step_error),
               100 * (step_error.empty() ? 0 : *std::ranges::max_element(step_error)), 100 * median(peak_error),
               100 * (peak_error.empty() ? 0 : *std::ranges::max_element(peak_error)), false_fit, false_oom, best_rank,
               best_rank <= 3 ? "in the" : "outside the", 3);
    state.counters["spearman"] = rho;
    state.counters["kendall"] = tau;
    state.counters["step_err_median"] = median(step_error);
    state.counters["optimum_rank"] = static_cast<double>(best_rank);
    state.counters["planned"] = planned;
  }
}
BENCHMARK(BM_AutoRank)->DenseRange(0, std::size(kJobs) - 1)->Iterations(1)->Repetitions(1)->Unit(benchmark::kSecond);

}  // namespace

BENCHMARK_MAIN();
