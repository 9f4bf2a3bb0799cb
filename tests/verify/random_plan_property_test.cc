// Property: every plan the primitives can build computes what the single-device graph computes. Random
// small training graphs (forward ops whose reference kernels exist, then autograd and sgd/adamw) under
// random plans (trans along random identifiers, even or strided, or replication; random devices) must
// match run_graph to 1e-9 in every tensor. A planted wrong materialization shows the interpreter
// catches what coverage validation cannot.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <set>
#include <utility>

#include "../plan/plan_test_graph.h"
#include "loom/ir/graph_text.h"
#include "loom/plan/validate.h"
#include "loom/verify/graph_interpreter.h"
#include "loom/verify/plan_interpreter.h"

namespace loom::verify {
namespace {

using ir::DType;
using ir::Shape;
using ir::TensorId;
using plan::Plan;
using plan::SubOpId;

constexpr std::uint64_t kBaseSeed = 20240611;
// LOOM_RANDOM_PLAN_CASES overrides the count for a deeper search (the default takes about a second).
int case_count() {
  const char* env = std::getenv("LOOM_RANDOM_PLAN_CASES");
  return env != nullptr ? std::max(1, std::atoi(env)) : 5000;
}
constexpr double kTolerance = 1e-9;

struct Rng {
  std::mt19937_64 engine;
  explicit Rng(std::uint64_t seed) : engine(seed) {}
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(engine); }  // inclusive
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(engine) < p; }
  template <class T>
  const T& pick(const std::vector<T>& items) {
    return items[static_cast<std::size_t>(uniform(0, static_cast<int>(items.size()) - 1))];
  }
};

// Builds a random forward graph op by op from the current activation `cur`.
class RandomGraph {
 public:
  explicit RandomGraph(Rng& rng) : rng_(rng), b_("random", ops::builtin_ops()) {}

  Expected<ir::Graph> build() {
    const std::int64_t batch = rng_.pick<std::int64_t>({2, 4, 6}), hidden = rng_.pick<std::int64_t>({2, 4, 6});
    Shape shape = rng_.chance(0.4) ? Shape{batch, rng_.pick<std::int64_t>({2, 3}), hidden} : Shape{batch, hidden};
    cur_ = b_.input("x", shape, DType::f32);
    pool_.push_back(cur_);
    const int steps = rng_.uniform(1, 4);
    for (int s = 0; s < steps; ++s) step(s);
    if (!has_parameter_) linear("head");
    if (rng_.chance(0.5)) {
      b_.set_loss(b_.op("mean", "loss", {cur_}));
    } else {
      const Shape& logits = b_.shape(cur_);
      const Shape label_shape(std::vector<std::int64_t>(logits.dims.begin(), logits.dims.end() - 1));
      const TensorId labels = b_.input("labels", label_shape, DType::i64);
      b_.set_loss(b_.op("cross_entropy", "loss", {cur_, labels}));
    }
    return std::move(b_).finish();
  }

 private:
  TensorId parameter(const std::string& name, Shape shape) {
    has_parameter_ = true;
    return b_.parameter(name, std::move(shape), DType::f32);
  }
  void set(TensorId t) {
    cur_ = t;
    pool_.push_back(t);
  }
  std::int64_t last() const { return b_.shape(cur_).dims.back(); }
  std::size_t rank() const { return b_.shape(cur_).rank(); }

  void linear(const std::string& name) {
    const std::int64_t out = rng_.pick<std::int64_t>({2, 4, 6});
    std::vector<TensorId> in = {cur_, parameter(name + ".weight", Shape{out, last()})};
    if (rng_.chance(0.5)) in.push_back(parameter(name + ".bias", Shape{out}));
    set(b_.op("linear", name, in));
  }

  void step(int s) {
    const std::string name = fmt::format("op{}", s);
    const std::int64_t out = rng_.pick<std::int64_t>({2, 4, 6});
    const bool after_softmax = std::exchange(after_softmax_, false);  // value-preserving cases restore it
    switch (rng_.uniform(0, 13)) {
      case 0: return linear(name);
      case 1: return set(b_.op("matmul", name, {cur_, parameter(name + ".weight", Shape{last(), out})}));
      case 2: {
        const std::string eq = rank() == 2 ? "ij,jk->ik" : "bij,jk->bik";
        return set(b_.op("einsum", name, {cur_, parameter(name + ".weight", Shape{last(), out})}, {{"equation", eq}}));
      }
      case 3:
      case 4: {  // add / mul with an earlier activation of the same shape (two readers: accumulate) or a parameter
        std::vector<TensorId> same;
        for (TensorId t : pool_)
          if (t != cur_ && b_.shape(t) == b_.shape(cur_)) same.push_back(t);
        const TensorId other = same.empty() || rng_.chance(0.3) ? parameter(name + ".p", b_.shape(cur_)) : rng_.pick(same);
        return set(b_.op(rng_.chance(0.5) ? "add" : "mul", name, {cur_, other}));
      }
      case 5: return set(b_.op("gelu", name, {cur_}));
      case 6: {
        const bool relu = rng_.chance(0.5);
        after_softmax_ = relu && after_softmax;
        return set(b_.op(relu ? "relu" : "silu", name, {cur_}));
      }
      case 7:
        after_softmax_ = true;
        return set(b_.op("softmax", name, {cur_}, {{"dim", std::int64_t{-1}}}));
      case 8: {
        std::vector<TensorId> in = {cur_, parameter(name + ".weight", Shape{last()})};
        if (rng_.chance(0.5)) return set(b_.op("rms_norm", name, in));
        in.push_back(parameter(name + ".bias", Shape{last()}));
        return set(b_.op("layer_norm", name, in));
      }
      case 9: {
        after_softmax_ = after_softmax;
        const auto r = static_cast<std::int64_t>(rank());
        const std::int64_t dim0 = r == 3 && rng_.chance(0.5) ? 0 : r - 2;
        return set(b_.op("transpose", name, {cur_}, {{"dim0", dim0}, {"dim1", r - 1}}));
      }
      case 10: {
        after_softmax_ = after_softmax;
        const Shape& s = b_.shape(cur_);
        std::vector<std::int64_t> to;
        if (s.rank() == 3 && rng_.chance(0.5)) to = {s[0], s[1] * s[2]};
        else if (s.rank() == 3) to = {s[0] * s[1], s[2]};
        else if (s[1] % 2 == 0) to = {s[0], 2, s[1] / 2};
        else return set(b_.op("gelu", name, {cur_}));
        return set(b_.op("reshape", name, {cur_}, {{"shape", to}}));
      }
      case 11:
      case 12: {  // sum / mean over a leading dim; rank 2 keeps it as size 1
        // Sums of softmax rows are constant: a norm of them divides rounding noise by sqrt(eps).
        if (after_softmax) return set(b_.op("gelu", name, {cur_}));
        const std::string type = rng_.chance(0.5) ? "sum" : "mean";
        const std::vector<std::int64_t> dims = {static_cast<std::int64_t>(rng_.uniform(0, 1))};
        if (rank() == 3) return set(b_.op(type, name, {cur_}, {{"dims", dims}}));
        return set(b_.op(type, name, {cur_}, {{"dims", std::vector<std::int64_t>{0}}, {"keepdim", true}}));
      }
      default: return linear(name);
    }
  }

  Rng& rng_;
  ir::GraphBuilder b_;
  TensorId cur_;
  std::vector<TensorId> pool_;
  bool has_parameter_ = false;
  bool after_softmax_ = false;  // only value-preserving ops (transpose, reshape, relu) since a softmax
};

ir::Graph training(const ir::Graph& forward, Rng& rng) {
  ir::OptimizerOptions options;
  options.master_weights = false;
  if (rng.chance(0.5)) {
    options.kind = ir::OptimizerKind::sgd;
    options.lr = 0.1;
    options.momentum = rng.chance(0.5) ? 0.9 : 0.0;
  } else {
    options.kind = ir::OptimizerKind::adamw;
    options.lr = 1e-2;
  }
  auto graph = ir::build_training_graph(forward, ops::builtin_ops(), options);
  EXPECT_TRUE(graph) << graph.error().to_string();
  return graph ? *graph : ir::Graph{};
}

// Random trans calls (refused ones skipped, e.g. dividing the value of replicated pieces, which trans
// refuses until value parts record their lineage) then a random assignment; `log` records the calls.
Plan random_plan(const ir::Graph& graph, Rng& rng, int& devices, std::string& log) {
  auto made = plan::make_plan(graph, ops::builtin_ops());
  EXPECT_TRUE(made) << made.error().to_string();
  Plan plan = *made;
  const int steps = rng.uniform(1, 12);
  for (int s = 0; s < steps; ++s) {
    std::vector<SubOpId> candidates;
    for (SubOpId id : plan.live_sub_ops())
      if (!plan.op_of(id).is_mirror()) candidates.push_back(id);
    const SubOpId target = rng.pick(candidates);
    const ir::Annotation& annotation = plan.layouts[plan.sub_op(target).op.index()].annotation;
    const int n = rng.uniform(2, 3);
    plan::TransAlgo algo = plan::ReplicateAlgo{};
    std::string what = "replicate";
    if (!rng.chance(0.2)) {
      const std::vector<std::string> names = annotation.identifiers();
      if (names.empty()) continue;
      const bool strided = rng.chance(0.3);
      const plan::SplitAlgo split{rng.pick(names), strided};
      what = fmt::format("split '{}'{}", split.identifier, strided ? " strided" : "");
      algo = split;
    }
    const std::string name = plan.sub_op(target).name;
    if (!plan::trans(plan, target, algo, n)) continue;
    log += fmt::format("trans(${} '{}', {}, {})\n", target.value, name, what, n);
  }
  devices = rng.uniform(1, 4);
  for (SubOpId id : plan.live_sub_ops())
    if (!plan.op_of(id).is_mirror()) {
      EXPECT_TRUE(plan::assign(plan, id, rng.uniform(0, devices - 1)));
    }
  return plan;
}

// Empty when the plan reproduces the graph; else what differs.
std::string check(const Plan& plan, int devices, const std::vector<NdArray>& initial, const std::vector<NdArray>& reference) {
  if (auto valid = plan::validate_plan(plan, devices); !valid) return "validate_plan: " + valid.error().to_string();
  auto run = run_plan(plan, devices, initial);
  if (!run) return "run_plan: " + run.error().to_string();
  auto c = compare_runs(*plan.graph, reference, run->values);
  if (!c) return c.error().to_string();
  if (c->overall.max_rel > kTolerance)
    return fmt::format("tensor '{}' differs: abs {:.3g} rel {:.3g}", c->overall.worst, c->overall.max_abs, c->overall.max_rel);
  return {};
}

TEST(RandomPlanProperty, EveryPlanMatchesTheSingleDeviceRun) {
  const auto start = std::chrono::steady_clock::now();
  const int cases = case_count();
  int failures = 0, transformed = 0, multi_device = 0;
  for (int i = 0; i < cases; ++i) {
    const std::uint64_t seed = kBaseSeed + static_cast<std::uint64_t>(i);
    Rng rng(seed);
    auto forward = RandomGraph(rng).build();
    ASSERT_TRUE(forward) << "seed " << seed << ": " << forward.error().to_string();
    const ir::Graph graph = training(*forward, rng);
    ASSERT_FALSE(graph.ops.empty()) << "seed " << seed;
    const std::vector<NdArray> initial = initial_values(graph, seed);
    auto reference = run_graph(graph, initial);
    ASSERT_TRUE(reference) << "seed " << seed << ": " << reference.error().to_string() << "\n" << ir::graph_to_text(graph);
    int devices = 1;
    std::string log;
    const Plan plan = random_plan(graph, rng, devices, log);
    transformed += log.empty() ? 0 : 1;
    multi_device += devices > 1 ? 1 : 0;
    const std::string problem = check(plan, devices, initial, *reference);
    if (problem.empty()) continue;
    if (++failures <= 3)
      ADD_FAILURE() << "seed " << seed << " (case " << i << "), " << devices << " devices: " << problem << "\ntrans calls:\n"
                    << log << "graph:\n" << ir::graph_to_text(graph) << "plan:\n" << plan::plan_to_text(plan);
  }
  EXPECT_EQ(failures, 0) << "of " << cases << " cases";
  EXPECT_GT(transformed, cases * 3 / 4);  // most cases exercise at least one accepted trans
  EXPECT_GT(multi_device, cases / 2);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%d random graph x plan cases, %d transformed, %d on >1 device, %.2f s\n", cases, transformed, multi_device, seconds);
}

// The planted bug: after a column split of fc1, the two parts' weight inputs (or output boxes) are
// swapped. Every tensor is still covered exactly, so validation passes, but the data is wrong.
void expect_planted_bug_caught(bool swap_outputs) {
  const ir::Graph graph = plan::testing::mlp_training_graph();
  auto made = plan::make_plan(graph, ops::builtin_ops());
  ASSERT_TRUE(made);
  Plan plan = *made;
  auto parts = plan::trans(plan, plan::testing::only_part(plan, "fc1"), plan::SplitAlgo{"o"}, 2);
  ASSERT_TRUE(parts);
  plan::testing::assign_all(plan, 0);
  ASSERT_TRUE(plan::assign(plan, (*parts)[1], 1));
  plan::SubOp &a = plan.sub_op((*parts)[0]), &b = plan.sub_op((*parts)[1]);
  if (swap_outputs) std::swap(a.outputs[0].box, b.outputs[0].box);
  else std::swap(a.inputs[1].box, b.inputs[1].box);
  auto valid = plan::validate_plan(plan, 2);
  ASSERT_TRUE(valid) << valid.error().to_string();
  const std::vector<NdArray> initial = initial_values(graph, 5);
  auto reference = run_graph(graph, initial);
  ASSERT_TRUE(reference);
  auto run = run_plan(plan, 2, initial);
  ASSERT_TRUE(run) << run.error().to_string();
  auto c = compare_runs(graph, *reference, run->values);
  ASSERT_TRUE(c);
  EXPECT_GT(c->overall.max_rel, 1e-6);
  EXPECT_GT(c->activation.max_rel, 1e-6) << c->activation.worst;
  EXPECT_GT(c->loss.max_rel, 1e-6);
}

TEST(RandomPlanProperty, PlantedSwappedOutputBoxesPassValidationButNotTheInterpreter) { expect_planted_bug_caught(true); }
TEST(RandomPlanProperty, PlantedSwappedWeightShardsPassValidationButNotTheInterpreter) { expect_planted_bug_caught(false); }

}  // namespace
}  // namespace loom::verify
