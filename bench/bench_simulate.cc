// Simulating a Megatron plan (issue 4): TP8 x DP8 of gpt3-13b on 64 devices (dgx-a100x8), the plan of
// bench_materialize, priced by the real models (sim::model_durations). Full: every device's program;
// symmetric: one program per device class (exec::assign_device_classes), after the symmetry checks
// (sim/symmetry.h), which read every program without simulating it. Materializing the plan is outside
// the timing; building the durations (empty caches, as `loom plan` prices a plan once) is inside.
#include <benchmark/benchmark.h>

#include "loom/cluster/presets.h"
#include "loom/cost/compute_model.h"
#include "loom/exec/device_classes.h"
#include "loom/exec/materialize.h"
#include "loom/ir/autograd.h"
#include "loom/models/zoo.h"
#include "loom/ops/registry.h"
#include "loom/policy/policy.h"
#include "loom/sim/durations.h"
#include "loom/sim/simulator.h"
#include "loom/sim/symmetry.h"

namespace {

using namespace loom;

struct Fixture {
  ir::Graph graph;
  plan::Plan plan;
  exec::ExecPlan exec;
  cluster::Cluster cluster;
  std::unique_ptr<cost::ComputeModel> compute;
  std::size_t instructions = 0;
};

const Fixture& gpt3_13b_tp8_dp8() {
  static const Fixture* fixture = [] {
    auto* f = new Fixture;
    models::ModelOptions options;
    options.batch = 64;  // 8 sequences per data-parallel rank
    f->graph = ir::build_training_graph(models::build_model("gpt3-13b", options).value(), ops::builtin_ops(), {}).value();
    f->plan = plan::make_plan(f->graph, ops::builtin_ops()).value();
    if (auto applied = policy::apply_policy(f->plan, "megatron", {.dp = 8, .tp = 8}); !applied)
      throw std::runtime_error(applied.error().to_string());
    f->exec = exec::materialize(f->plan, 64).value().exec;
    f->exec.plan = &f->plan;
    exec::assign_device_classes(f->exec);
    for (const auto& program : f->exec.programs) f->instructions += program.size();
    f->cluster = cluster::make_cluster("dgx-a100x8").value();
    f->compute = std::make_unique<cost::ComputeModel>(
        cost::ComputeModel::make(f->plan, ops::builtin_ops(), f->cluster.gpu).value());
    return f;
  }();
  return *fixture;
}

// Fresh durations (empty caches) for every run, as `loom plan` prices a plan once.
sim::Durations durations(const Fixture& f) { return sim::model_durations(f.exec, *f.compute, f.cluster).value(); }

void simulate(benchmark::State& state, bool classes) {
  const Fixture& f = gpt3_13b_tp8_dp8();
  sim::SimResult result;
  for (auto _ : state) {
    auto simulated = sim::simulate(f.exec, durations(f), {.use_device_classes = classes});
    if (!simulated) {
      state.SkipWithError(simulated.error().to_string().c_str());
      return;
    }
    state.PauseTiming();
    result = std::move(*simulated);  // freeing the previous result is not simulation
    state.ResumeTiming();
  }
  state.counters["instructions"] = static_cast<double>(f.instructions);
  state.counters["sub_ops"] = static_cast<double>(f.plan.live_sub_ops().size());
  state.counters["device_classes"] = static_cast<double>(f.exec.representatives.size());
  state.counters["simulated_devices"] = static_cast<double>(result.simulated_devices.size());
  state.counters["fell_back"] = result.symmetry_fallback.empty() ? 0 : 1;
  state.counters["step_ms"] = result.step_time * 1e3;
  state.counters["idle_pct"] = 100 * result.idle_fraction();
}

void BM_SimulateFull(benchmark::State& state) { simulate(state, false); }
void BM_SimulateSymmetric(benchmark::State& state) { simulate(state, true); }

// Parts of the above, each on its own: pricing every compute of every device (what the full
// simulation asks of the ComputeModel), and the structural symmetry check with its index.
void BM_PriceEveryCompute(benchmark::State& state) {
  const Fixture& f = gpt3_13b_tp8_dp8();
  double total = 0;
  for (auto _ : state) {
    const sim::Durations priced = durations(f);
    for (int d = 0; d < f.exec.num_devices; ++d)
      for (const auto& instruction : f.exec.programs[static_cast<std::size_t>(d)])
        if (const auto* c = std::get_if<exec::Compute>(&instruction)) total += priced.compute(f.plan.sub_op(c->sub_op), d);
  }
  benchmark::DoNotOptimize(total);
}

void BM_SymmetryCheck(benchmark::State& state) {
  const Fixture& f = gpt3_13b_tp8_dp8();
  for (auto _ : state) {
    auto index = sim::CommIndex::build(f.exec);
    if (!index || !sim::symmetry_violation(f.exec, *index, durations(f)).empty()) state.SkipWithError("not symmetric");
  }
}

}  // namespace

BENCHMARK(BM_SimulateFull)->Unit(benchmark::kMillisecond)->Iterations(3)->Repetitions(3);
BENCHMARK(BM_SimulateSymmetric)->Unit(benchmark::kMillisecond)->Iterations(3)->Repetitions(3);
BENCHMARK(BM_PriceEveryCompute)->Unit(benchmark::kMillisecond)->Iterations(3)->Repetitions(3);
BENCHMARK(BM_SymmetryCheck)->Unit(benchmark::kMillisecond)->Iterations(3)->Repetitions(3);
BENCHMARK_MAIN();
