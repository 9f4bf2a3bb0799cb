// Property: materialization preserves meaning. The random graphs and plans of random_plans.h (with
// micro-batched pipelines and data parallelism among them) are materialized (exec/materialize.h) with
// the layout search or the general fallback, checked structurally (exec/check.h), run by the ExecPlan
// interpreter, and must match run_graph to 1e-9 in every tensor. Planted wrong materializations (an all-reduce over half its
// group, a combine missing an input, recvs reading each other's tags) must be caught by the interpreter
// or the comparison.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "loom/cluster/presets.h"
#include "loom/exec/check.h"
#include "loom/exec/exec_text.h"
#include "loom/exec/materialize.h"
#include "loom/plan/validate.h"
#include "loom/verify/exec_interpreter.h"
#include "random_plans.h"

namespace loom::verify {
namespace {

using exec::Instruction;

constexpr std::uint64_t kBaseSeed = 20240611;  // random_plan_property_test's: the same graphs
// LOOM_RANDOM_EXEC_CASES overrides the count for a deeper search, LOOM_RANDOM_EXEC_FIRST the first case
// (to rerun a failure alone: LOOM_RANDOM_EXEC_FIRST=<case> LOOM_RANDOM_EXEC_CASES=1).
int env_or(const char* name, int fallback, int least) {
  const char* env = std::getenv(name);
  return env != nullptr ? std::max(least, std::atoi(env)) : fallback;
}
int case_count() { return env_or("LOOM_RANDOM_EXEC_CASES", 1000, 1); }
int first_case() { return env_or("LOOM_RANDOM_EXEC_FIRST", 0, 0); }
constexpr double kTolerance = 1e-9;

// Each case alternates how it is materialized: the layout search priced by bandwidth alone (tiny test
// tensors then take the collectives full-size ones would), the search under real latencies (mostly
// p2p), or the fallback alone (slice, send, combine).
exec::MaterializeOptions options_for(std::uint64_t seed) {
  exec::MaterializeOptions options;
  switch (seed % 3) {
    case 0: {
      auto cluster = cluster::make_cluster("dgx-a100");
      EXPECT_TRUE(cluster);
      if (cluster) options.cost_model = exec::bandwidth_only_cost(*cluster);
      break;
    }
    case 1: break;
    default: options.use_layout_search = false;
  }
  return options;
}

// Runs an ExecPlan against the single-device reference: empty when they agree, else what differs.
std::string compare_exec(const exec::ExecPlan& exec, const std::vector<NdArray>& initial, const std::vector<NdArray>& reference) {
  auto run = run_exec_plan(exec, initial);
  if (!run) return "run_exec_plan: " + run.error().to_string();
  return testing::disagreement(*exec.plan->graph, reference, run->values, kTolerance);
}

// Whether run_plan reproduces the graph: tells a wrong plan from a wrong materialization.
std::string plan_verdict(const testing::RandomCase& c) {
  auto run = run_plan(c.plan, c.devices, c.initial);
  if (!run) return run.error().to_string();
  const std::string problem = testing::disagreement(*c.graph, c.reference, run->values, kTolerance);
  return problem.empty() ? "agrees" : "differs too: " + problem;
}

struct Counts {
  int collectives = 0, sends = 0, combines = 0, multi_device = 0, pipelines = 0;
};

void count(const exec::ExecPlan& exec, Counts& counts) {
  bool collective = false, send = false, combine = false;
  for (const auto& program : exec.programs)
    for (const Instruction& i : program) {
      collective |= std::holds_alternative<exec::Collective>(i);
      send |= std::holds_alternative<exec::Send>(i);
      combine |= std::holds_alternative<exec::Local>(i) && std::get<exec::Local>(i).kind == exec::LocalKind::combine;
    }
  counts.collectives += collective ? 1 : 0;
  counts.sends += send ? 1 : 0;
  counts.combines += combine ? 1 : 0;
  counts.multi_device += exec.num_devices > 1 ? 1 : 0;
}

TEST(RandomExecProperty, EveryMaterializedPlanMatchesTheSingleDeviceRun) {
  const auto start = std::chrono::steady_clock::now();
  const int cases = case_count();
  int failures = 0;
  Counts counts;
  for (int i = first_case(); i < first_case() + cases; ++i) {
    const std::uint64_t seed = kBaseSeed + static_cast<std::uint64_t>(i);
    auto c = testing::random_case(seed, /*structured=*/true);
    ASSERT_TRUE(c) << "seed " << seed << ": " << c.error().to_string();
    counts.pipelines += c->log.find("micro-batches") != std::string::npos ? 1 : 0;
    std::string problem;
    std::string text;
    if (auto valid = plan::validate_plan(c->plan, c->devices); !valid) {
      problem = "validate_plan: " + valid.error().to_string();
    } else if (auto m = exec::materialize(c->plan, c->devices, options_for(seed)); !m) {
      problem = "materialize: " + m.error().to_string();
    } else {
      count(m->exec, counts);
      text = testing::programs_text(m->exec);
      if (auto checked = exec::check_exec_plan(m->exec); !checked) problem = "check_exec_plan: " + checked.error().to_string();
      else problem = compare_exec(m->exec, c->initial, c->reference);
    }
    if (problem.empty()) continue;
    if (++failures <= 3)
      ADD_FAILURE() << "case " << i << " (materialize option " << seed % 3 << "): " << problem
                    << "\nthe plan interpreter on the same plan: " << plan_verdict(*c) << "\n" << c->describe() << text;
  }
  EXPECT_EQ(failures, 0) << "of " << cases << " cases";
  if (cases >= 100) {  // not vacuous: the cases move data every way materialization can
    EXPECT_GT(counts.multi_device, cases / 2);
    EXPECT_GT(counts.collectives, cases / 30);
    EXPECT_GT(counts.sends, cases / 5);
    EXPECT_GT(counts.combines, cases / 5);
    EXPECT_GT(counts.pipelines, cases / 10);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%d random graph x plan x materialization cases: %d on >1 device, %d pipelined, with collectives %d, sends %d, "
              "combines %d; %.2f s\n",
              cases, counts.multi_device, counts.pipelines, counts.collectives, counts.sends, counts.combines, seconds);
}

// --- planted wrong materializations of the MLP fixture (tests/plan/plan_test_graph.h) -------------

// The MLP under a plan, its leaves and its single-device run.
struct Fixture {
  const ir::Graph& graph = plan::testing::graph();
  plan::Plan plan;
  int devices;
  std::vector<NdArray> initial = initial_values(graph, 13);
  std::vector<NdArray> reference;

  Fixture(Expected<plan::Plan> p, int num_devices) : devices(num_devices) {
    EXPECT_TRUE(p) << p.error().to_string();
    if (p) plan = std::move(*p);
    auto r = run_graph(graph, initial);
    EXPECT_TRUE(r) << r.error().to_string();
    if (r) reference = *r;
  }
  exec::ExecPlan materialize(bool search) const {
    auto m = exec::materialize(plan, devices, search ? options_for(0) : options_for(2));
    EXPECT_TRUE(m) << m.error().to_string();
    if (!m) return {};
    // The unmutated plan is right: what the mutations break is theirs.
    EXPECT_EQ(compare_exec(m->exec, initial, reference), "");
    return m->exec;
  }
  // The interpreter errs or the comparison differs; returns which.
  std::string expect_caught(const exec::ExecPlan& mutated) const {
    const std::string problem = compare_exec(mutated, initial, reference);
    EXPECT_NE(problem, "") << testing::programs_text(mutated);
    return problem;
  }
};

// Data parallel over 4 devices: the weight gradients are all-reduced (search) or sent and combined.
Fixture data_parallel_fixture() { return Fixture(testing::data_parallel(plan::testing::graph(), 4), 4); }

TEST(RandomExecProperty, PlantedAllReduceOverHalfItsGroupIsCaught) {
  const Fixture f = data_parallel_fixture();
  exec::ExecPlan exec = f.materialize(/*search=*/true);
  // The first all-reduce runs as two all-reduces over {0, 1} and {2, 3}: structurally fine, each half
  // agreeing on its group and tag, but each half sums only its own gradients.
  std::optional<std::int64_t> tag;
  for (int d = 0; d < f.devices; ++d)
    for (Instruction& i : exec.programs[static_cast<std::size_t>(d)])
      if (auto* c = std::get_if<exec::Collective>(&i); c != nullptr && c->kind == comm::Primitive::all_reduce &&
                                                      c->group.size() == 4 && (!tag || c->tag == *tag)) {
        tag = c->tag;
        c->group = d < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
        if (d >= 2) c->tag = static_cast<std::int64_t>(exec.collectives.size());
        break;
      }
  ASSERT_TRUE(tag) << "no all-reduce over 4 devices:\n" << testing::programs_text(exec);
  exec.collectives.push_back(exec.collectives[static_cast<std::size_t>(*tag)]);
  EXPECT_TRUE(exec::check_exec_plan(exec)) << "the mutation is meant to be structurally valid";
  EXPECT_NE(f.expect_caught(exec).find("differs"), std::string::npos);
}

TEST(RandomExecProperty, PlantedCombineMissingAnInputIsCaught) {
  const Fixture f = data_parallel_fixture();
  exec::ExecPlan exec = f.materialize(/*search=*/false);
  exec::Local* combine = nullptr;
  for (auto& program : exec.programs)
    for (Instruction& i : program)
      if (auto* l = std::get_if<exec::Local>(&i); combine == nullptr && l != nullptr && l->kind == exec::LocalKind::combine)
        if (l->inputs.size() > 1) combine = l;
  ASSERT_NE(combine, nullptr) << "no combine of several inputs:\n" << testing::programs_text(exec);
  combine->inputs.pop_back();
  EXPECT_NE(f.expect_caught(exec).find("is not produced whole"), std::string::npos);
}

TEST(RandomExecProperty, PlantedRecvsReadingEachOthersTagsAreCaught) {
  // A GPipe pipeline, fc1 and act on device 0, fc2 and the loss on device 1: device 0 sends the two
  // micro-batches' activations before it waits for anything, so device 1's recvs, their tags swapped,
  // each take the other micro-batch's rows.
  const Fixture f(testing::pipeline_plan(plan::testing::graph(), 2, plan::ScheduleKind::gpipe), 2);
  exec::ExecPlan exec = f.materialize(/*search=*/false);
  std::vector<exec::Recv*> recvs;
  for (Instruction& i : exec.programs[1])
    if (auto* r = std::get_if<exec::Recv>(&i)) recvs.push_back(r);
  ASSERT_GE(recvs.size(), 2u) << testing::programs_text(exec);
  std::swap(recvs[0]->tag, recvs[1]->tag);
  EXPECT_NE(f.expect_caught(exec).find("receives"), std::string::npos);
}

}  // namespace
}  // namespace loom::verify
