// `loom plan` at scale (issue 4): gpt3-175b on DGX-A100 x 128 (1024 GPUs), TP8 x PP16 x DP8, 64
// micro-batches, interleaved 1F1B over 2 chunks, selective recompute, global batch 512: planned folded
// (exec/fold.h) and its four files written, as `loom plan` does. Counters: the predicted step and MFU,
// the slice's sub-ops, the unfolded instructions, and the process's peak resident memory.
//
// Beside it, the same model on 64 GPUs (TP8 x PP8, 8 micro-batches) planned both ways: explicit (every
// sub-op of every micro-batch and replica) and folded, so the ratio of their times and their predicted
// steps sit side by side in one run.
#include <benchmark/benchmark.h>

#include <sys/resource.h>

#include <filesystem>

#include "loom/api/job.h"

namespace {

using namespace loom;

double peak_rss_gib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / (1024.0 * 1024.0);  // ru_maxrss is in KiB on Linux
}

api::JobOptions gpt3_175b(const std::string& cluster, policy::ParallelConfig config, std::int64_t batch,
                          api::Fold fold) {
  api::JobOptions r;
  r.model = "gpt3-175b";
  r.global_batch = batch;
  r.cluster = cluster;
  r.policy = "megatron";
  r.fold = fold;
  return api::with_config(r, config);
}

void report(benchmark::State& state, const api::Job& r) {
  std::size_t instructions = 0;
  for (const auto& program : (r.folded ? r.step.step : r.exec).programs) instructions += program.size();
  state.counters["step_s"] = r.metrics.step_time;
  state.counters["mfu_pct"] = 100 * r.metrics.mfu;
  state.counters["sub_ops"] = static_cast<double>(r.plan.live_sub_ops().size());
  state.counters["instructions"] = static_cast<double>(instructions);
  state.counters["peak_rss_GiB"] = peak_rss_gib();
}

void BM_Plan1024Gpus(benchmark::State& state) {
  const api::JobOptions request =
      gpt3_175b("dgx-a100x128",
                {.dp = 8, .tp = 8, .pp = 16, .micro_batches = 64, .virtual_stages = 2,
                 .recompute = policy::Recompute::selective},
                512, api::Fold::automatic);
  const std::string out = (std::filesystem::temp_directory_path() / "loom-bench-plan-1024").string();
  for (auto _ : state) {
    auto result = api::plan_job(request);
    if (!result) {
      state.SkipWithError(result.error().message.c_str());
      return;
    }
    auto files = api::write_plan_files(**result, out);
    if (!files) {
      state.SkipWithError(files.error().message.c_str());
      return;
    }
    report(state, **result);
    state.counters["folded"] = (*result)->folded ? 1 : 0;
  }
  std::filesystem::remove_all(out);
}
BENCHMARK(BM_Plan1024Gpus)->Unit(benchmark::kSecond)->Iterations(1)->Repetitions(3)->ReportAggregatesOnly(false);

void BM_Plan64Gpus(benchmark::State& state) {
  const api::Fold fold = state.range(0) == 1 ? api::Fold::on : api::Fold::off;
  const api::JobOptions request = gpt3_175b("dgx-a100x8", {.dp = 1, .tp = 8, .pp = 8, .micro_batches = 8}, 8, fold);
  for (auto _ : state) {
    auto result = api::plan_job(request);
    if (!result) {
      state.SkipWithError(result.error().message.c_str());
      return;
    }
    report(state, **result);
  }
  state.SetLabel(fold == api::Fold::on ? "folded" : "explicit");
}
BENCHMARK(BM_Plan64Gpus)->Arg(0)->Arg(1)->Unit(benchmark::kSecond)->Iterations(1)->Repetitions(3);

}  // namespace

BENCHMARK_MAIN();
