// The 3F1B order search (plan/schedule_3f1b.h) timed as nnScaler Fig. 12 times its Tessel search with the
// Table 7 constraints: S = 2, 4, 8 stages, AlphaFold2's 4 passes (3 recycles + 1), m = 2S and 4S
// micro-batches. Prints each template's makespan and bubble on uniform costs beside the passes run as
// GPipe blocks (the bound the unit tests hold it to), then times the search. The paper's search takes
// about 60 s for 4 stages with the constraints (11.7x faster than without).
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "loom/plan/schedule_3f1b.h"

namespace {

using namespace loom::plan;

constexpr int kPasses = 4;

void print_table() {
  fmt::print("3F1B search, {} passes, uniform costs (F = 1, whole backward = 2)\n", kPasses);
  fmt::print("{:>3} {:>4} {:>9} {:>11} {:>12} {:>9} {:>8}\n", "S", "m", "makespan", "bubble s0", "peak s0", "ahead",
             "rollouts");
  for (int S : {2, 4, 8})
    for (int m : {2 * S, 4 * S}) {
      auto found = search_three_f_one_b(S, kPasses, m);
      if (!found) {
        fmt::print("{:>3} {:>4} error: {}\n", S, m, found.error().to_string());
        continue;
      }
      fmt::print("{:>3} {:>4} {:>9} {:>11} {:>12} {:>9} {:>8}\n", S, m, found->evaluation.makespan,
                 found->evaluation.idle.front(), found->evaluation.peak_held.front(), found->recycles_ahead,
                 found->rollouts);
    }
  fmt::print("\n");
}

void BM_Search3F1B(benchmark::State& state) {
  const int S = static_cast<int>(state.range(0)), m = static_cast<int>(state.range(1));
  for (auto _ : state) {
    auto found = search_three_f_one_b(S, kPasses, m);
    benchmark::DoNotOptimize(found->evaluation.makespan);
  }
}

BENCHMARK(BM_Search3F1B)->Args({2, 4})->Args({4, 8})->Args({8, 16})->Args({8, 32})->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  print_table();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
