// Building a preset's training graph (forward + backward + optimizer): time and peak heap.
// Target (issue 2): gpt3-175b in < 1 s and < 500 MB.
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include <benchmark/benchmark.h>

#include "loom/ir/autograd.h"
#include "loom/models/zoo.h"
#include "loom/ops/registry.h"

// Heap accounting: every allocation of this process passes through these, so the peak of live bytes
// during a build is exact (malloc_usable_size gives the size back on free).
namespace {
std::atomic<std::int64_t> g_live{0};
std::atomic<std::int64_t> g_peak{0};

void* counted_alloc(std::size_t size) {
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  const std::int64_t live = g_live.fetch_add(static_cast<std::int64_t>(malloc_usable_size(p))) +
                            static_cast<std::int64_t>(malloc_usable_size(p));
  std::int64_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return p;
}

void counted_free(void* p) {
  if (p == nullptr) return;
  g_live.fetch_sub(static_cast<std::int64_t>(malloc_usable_size(p)));
  std::free(p);
}
}  // namespace

void* operator new(std::size_t size) { return counted_alloc(size); }
void* operator new[](std::size_t size) { return counted_alloc(size); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }

namespace {

void BM_BuildTrainingGraph(benchmark::State& state, const char* preset) {
  const loom::ops::OpRegistry& catalog = loom::ops::builtin_ops();  // built once, outside the timing
  std::int64_t ops = 0;
  for (auto _ : state) {
    const std::int64_t before = g_live.load();
    g_peak.store(before);
    auto forward = loom::models::build_model(preset, {});
    if (!forward) {
      state.SkipWithError(forward.error().message.c_str());
      return;
    }
    auto training = loom::ir::build_training_graph(*forward, catalog, {});
    if (!training) {
      state.SkipWithError(training.error().message.c_str());
      return;
    }
    ops = static_cast<std::int64_t>(training->ops.size());
    benchmark::DoNotOptimize(training->ops.data());
    state.counters["peak_MB"] = static_cast<double>(g_peak.load() - before) / 1e6;
  }
  state.counters["ops"] = static_cast<double>(ops);
}

BENCHMARK_CAPTURE(BM_BuildTrainingGraph, gpt3_175b, "gpt3-175b")->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_BuildTrainingGraph, llama2_70b, "llama2-70b")->Unit(benchmark::kMillisecond)->MinTime(1.0);

}  // namespace

BENCHMARK_MAIN();
