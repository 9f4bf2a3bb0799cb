// RVD search on SuperScaler's Table 3 micro-benchmark (two v100x8 servers, a 1-D fp32 tensor of 256 MiB):
// prints plain p2p vs Loom's searched plan under the α-β cost model, then times the search per transition,
// uncached and cached. Target (issue): < 1 ms per transition after caching.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "loom/cluster/presets.h"
#include "loom/comm/search.h"
#include "loom/comm/superscaler_cases.h"
#include "loom/core/strings.h"

namespace {

using namespace loom;

const comm::TensorSpec kTensor{ir::Shape{64LL << 20}, ir::DType::f32};  // 256 MiB

const cluster::Cluster& testbed() {
  static const cluster::Cluster c = cluster::make_cluster("v100x8x2").value();
  return c;
}

void print_table() {
  const comm::AlphaBetaCostModel model(testbed());
  fmt::print("SuperScaler Table 3 on {} (1-D f32 tensor, 256 MiB), alpha-beta model\n", testbed().name);
  fmt::print("{:<12} {:>10} {:>10} {:>8}  {}\n", "case", "p2p ms", "loom ms", "speedup", "primitives");
  int faster = 0;
  for (const comm::NamedRequest& c : comm::superscaler_table3_cases(kTensor)) {
    auto plan = comm::search_transition(c.request, testbed(), model);
    if (!plan) {
      fmt::print("{:<12} error: {}\n", c.name, plan.error().to_string());
      continue;
    }
    std::vector<std::string> steps;
    for (const comm::PlannedStep& s : plan->steps) steps.push_back(s.step.rule);
    faster += plan->time < 0.99 * plan->baseline_time ? 1 : 0;
    fmt::print("{:<12} {:>10.3f} {:>10.3f} {:>7.2f}x  {}\n", c.name, plan->baseline_time * 1e3, plan->time * 1e3,
               plan->baseline_time / plan->time, join(steps, ", "));
  }
  fmt::print("faster than p2p in {} of 18 cases\n\n", faster);
}

void BM_SearchUncached(benchmark::State& state) {
  const comm::AlphaBetaCostModel model(testbed());
  const auto cases = comm::superscaler_table3_cases(kTensor);
  std::int64_t states = 0;
  for (auto _ : state)
    for (const comm::NamedRequest& c : cases) {
      auto plan = comm::search_transition(c.request, testbed(), model);
      states += plan->states_explored;
      benchmark::DoNotOptimize(plan->time);
    }
  state.counters["per_transition"] =
      benchmark::Counter(static_cast<double>(cases.size()), benchmark::Counter::kIsIterationInvariantRate |
                                                                benchmark::Counter::kInvert);
  state.counters["states"] = static_cast<double>(states) / static_cast<double>(state.iterations() * cases.size());
}

void BM_SearchCached(benchmark::State& state) {
  const comm::AlphaBetaCostModel model(testbed());
  const auto cases = comm::superscaler_table3_cases(kTensor);
  comm::TransitionCache cache;
  for (const comm::NamedRequest& c : cases) benchmark::DoNotOptimize(cache.find(c.request, testbed(), model));
  for (auto _ : state)
    for (const comm::NamedRequest& c : cases) {
      auto plan = cache.find(c.request, testbed(), model);
      benchmark::DoNotOptimize(plan->time);
    }
  state.counters["per_transition"] =
      benchmark::Counter(static_cast<double>(cases.size()), benchmark::Counter::kIsIterationInvariantRate |
                                                                benchmark::Counter::kInvert);
}

BENCHMARK(BM_SearchUncached)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SearchCached)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  print_table();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
