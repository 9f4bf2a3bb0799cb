// The constraint order search (search/order_search.h) on nnScaler's 3F1B (Table 7's constraints,
// AlphaFold2's 4 passes) against the pilot search (plan/schedule_3f1b.h): S = 2, 4, 8 stages, m = 2S and
// 4S micro-batches, on uniform costs (F = 1, whole backward 2) and on a heavier backward (F = 1, B = 2,
// W = 1.5). Prints per case both makespans (evaluate_schedule's, on the same costs and the same 1F1B
// memory), whether Z3 proved its optimum, and both times; then times the Z3 search with google-benchmark.
// nnScaler reports more than an hour for 3F1B at 8 stages without the constraints.
#include <chrono>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "loom/plan/schedule_3f1b.h"
#include "loom/search/order_pipeline.h"

namespace {

using namespace loom;

constexpr int kPasses = 4;

double seconds_since(std::chrono::steady_clock::time_point begin) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

search::PipelineOrderShape shape(int S, int m, plan::BlockCosts costs) {
  search::PipelineOrderShape out{.devices = S, .passes = kPasses, .micro_batches = m, .costs = costs, .table7 = true};
  return out;
}

struct Timed {
  Expected<search::PipelineOrder> order;
  double seconds;
};

Timed run(const search::PipelineOrderShape& shape) {
  const auto begin = std::chrono::steady_clock::now();
  auto order = search::search_pipeline_order(shape);
  return {std::move(order), seconds_since(begin)};
}

void print_table(plan::BlockCosts costs) {
  fmt::print("3F1B, {} passes, F = {}, whole backward = {}; z3: the order search (from the pilot's and "
             "the greedy's orders); z3 alone: without them, at most S - d + {} micro-batches in flight\n",
             kPasses, costs.forward, costs.backward + costs.weight, kPasses - 1);
  fmt::print("{:>3} {:>4} {:>8} {:>8} | {:>8} {:>5} {:>6} {:>7} | {:>8} {:>6} {:>7} {:>5} {:>6}\n", "S", "m", "pilot",
             "pilot s", "z3", "calls", "proven", "z3 s", "z3 alone", "proven", "s", "calls", "pairs");
  for (int S : {2, 4, 8})
    for (int m : {2 * S, 4 * S}) {
      const auto begin = std::chrono::steady_clock::now();
      auto pilot = plan::search_three_f_one_b(S, kPasses, m, costs);
      const double pilot_s = seconds_since(begin);
      search::PipelineOrderShape z3_shape = shape(S, m, costs), alone_shape = z3_shape;
      alone_shape.greedy_upper_bound = alone_shape.pilot_upper_bound = false;
      alone_shape.recycles_ahead = kPasses - 1;
      const Timed z3 = run(z3_shape), alone = run(alone_shape);
      if (!pilot || !z3.order || !alone.order) {
        fmt::print("{:>3} {:>4} error: {}\n", S, m,
                   (!pilot ? pilot.error() : !z3.order ? z3.order.error() : alone.order.error()).to_string());
        continue;
      }
      const auto proven = [](const Timed& t) { return t.order->solution.proven_optimal ? "yes" : "no"; };
      fmt::print("{:>3} {:>4} {:>8} {:>8.3f} | {:>8} {:>5} {:>6} {:>7.3f} | {:>8} {:>6} {:>7.3f} {:>5} {:>6}\n", S, m,
                 pilot->evaluation.makespan, pilot_s, z3.order->evaluation.makespan, z3.order->solution.solver_calls,
                 proven(z3), z3.seconds, alone.order->evaluation.makespan, proven(alone), alone.seconds,
                 alone.order->solution.solver_calls, alone.order->solution.decided_pairs);
    }
  fmt::print("\n");
}

void BM_OrderSearch3F1B(benchmark::State& state) {
  const int S = static_cast<int>(state.range(0)), m = static_cast<int>(state.range(1));
  for (auto _ : state) {
    auto found = search::search_pipeline_order(shape(S, m, {}));
    benchmark::DoNotOptimize(found->evaluation.makespan);
  }
}

BENCHMARK(BM_OrderSearch3F1B)->Args({4, 8})->Args({8, 16})->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

int main(int argc, char** argv) {
  print_table({1, 1, 1});
  print_table({1, 2, 1.5});
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
