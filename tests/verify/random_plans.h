// Random small training graphs and random plans over them, shared by the property tests of the plan
// interpreter (random_plan_property_test.cc) and the ExecPlan interpreter (random_exec_property_test.cc).
// Graphs: forward ops whose reference kernels exist, then autograd and sgd/adamw. Plans: trans along
// random identifiers (even or strided) or replication on random devices, or (random_case's `structured`)
// micro-batches over two pipeline stages under a GPipe or 1F1B template, or data parallelism. Everything
// is drawn from one seeded generator, so a seed names a case.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../plan/plan_test_graph.h"
#include "loom/exec/exec_text.h"
#include "loom/ir/graph_text.h"
#include "loom/plan/batch.h"
#include "loom/plan/micro_batches.h"
#include "loom/plan/schedule.h"
#include "loom/plan/validate.h"
#include "loom/verify/graph_interpreter.h"
#include "loom/verify/plan_interpreter.h"

namespace loom::verify::testing {

using ir::DType;
using ir::Shape;
using ir::TensorId;
using plan::Plan;
using plan::SubOpId;

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

inline ir::Graph training(const ir::Graph& forward, Rng& rng) {
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
inline Plan random_plan(const ir::Graph& graph, Rng& rng, int& devices, std::string& log) {
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

inline std::vector<ir::OpId> forward_ops(const ir::Graph& graph) {
  std::vector<ir::OpId> forward;
  for (const ir::Op& op : graph.ops)
    if (op.pass == ir::Pass::forward) forward.push_back(op.id);
  return forward;
}

// Micro-batching and pipeline stages, from the plan helpers: every forward op split into 2 micro-batches,
// the forward ops before `cut` (in program order) on stage 0 = device 0 and the rest on stage 1 = device
// 1 (a single stage when `cut` is their count), optimizer steps with their parameter's first consumer,
// the loss-gradient seed with the loss, then the schedule template. Errors: a helper refuses (e.g. a
// forward op without a batch identifier to split), or the plan does not validate: 1F1B deadlocks when
// micro-batches depend on each other (an op the split left whole, such as a gradient accumulation, or a
// batch a transpose moved, so that the loss's micro-batches mix rows).
inline Expected<Plan> pipeline_plan(const ir::Graph& graph, std::size_t cut, plan::ScheduleKind kind) {
  constexpr int kMicroBatches = 2;
  LOOM_ASSIGN_OR_RETURN(Plan plan, plan::make_plan(graph, ops::builtin_ops()));
  const std::vector<ir::OpId> forward = forward_ops(graph);
  LOOM_ASSIGN_OR_RETURN(plan::MicroBatches mb, plan::split_micro_batches(plan, forward, kMicroBatches));
  const int stages = cut < forward.size() ? 2 : 1;
  std::vector<int> stage_of(graph.ops.size(), stages - 1);
  std::vector<std::vector<ir::OpId>> stage_ops(static_cast<std::size_t>(stages));
  for (std::size_t i = 0; i < forward.size(); ++i) {
    stage_of[forward[i].index()] = i < cut ? 0 : stages - 1;
    stage_ops[static_cast<std::size_t>(stage_of[forward[i].index()])].push_back(forward[i]);
  }
  std::vector<std::vector<std::vector<SubOpId>>> blocks(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s)
    for (int m = 0; m < kMicroBatches; ++m) {
      blocks[static_cast<std::size_t>(s)].push_back(mb.micro_batch(stage_ops[static_cast<std::size_t>(s)], m));
      LOOM_RETURN_IF_ERROR(plan::stage(plan, blocks[static_cast<std::size_t>(s)].back(), s));
    }
  for (const ir::Op& op : graph.ops) {
    if (op.pass == ir::Pass::forward || op.is_mirror()) continue;
    int s = stages - 1;  // the seed, with the loss
    if (op.pass == ir::Pass::optimizer)
      for (ir::OpId f : forward)
        if (std::ranges::find(graph.op(f).inputs, op.inputs[0]) != graph.op(f).inputs.end()) {
          s = stage_of[f.index()];
          break;
        }
    LOOM_RETURN_IF_ERROR(plan::stage(plan, plan.parts[op.id.index()], s));
  }
  LOOM_RETURN_IF_ERROR(plan::apply_schedule(plan, {kind}, blocks));
  LOOM_RETURN_IF_ERROR(plan::validate_plan(plan, stages));
  return plan;
}

// pipeline_plan with a random cut and template; nullopt when it is refused.
inline std::optional<Plan> random_pipeline_plan(const ir::Graph& graph, Rng& rng, int& devices, std::string& log) {
  const auto n = static_cast<int>(forward_ops(graph).size());
  const auto cut = static_cast<std::size_t>(n >= 2 ? rng.uniform(1, n - 1) : n);
  const plan::ScheduleKind kind = rng.chance(0.5) ? plan::ScheduleKind::gpipe : plan::ScheduleKind::one_f_one_b;
  Expected<Plan> plan = pipeline_plan(graph, cut, kind);
  if (!plan) return std::nullopt;
  devices = n >= 2 ? 2 : 1;
  log += fmt::format("2 micro-batches, {} stages cut before forward op {}, {}\n", devices, cut,
                     kind == plan::ScheduleKind::gpipe ? "GPipe" : "1F1B");
  return std::move(*plan);
}

// Data parallelism: every forward op split n ways along its batch identifier, part k on device k, and
// the other ops (optimizer steps, the loss-gradient seed) replicated, one replica a device. The exec
// tests hand-build programs for it and plant bugs in its materialization. Errors: a forward op without
// a batch identifier, or whose batch n does not divide.
inline Expected<Plan> data_parallel(const ir::Graph& graph, int n) {
  LOOM_ASSIGN_OR_RETURN(Plan p, plan::make_plan(graph, ops::builtin_ops()));
  const auto batch = plan::batch_identifiers(p);
  for (const ir::Op& op : graph.ops) {
    if (op.is_mirror()) continue;
    if (op.pass == ir::Pass::forward && !batch[op.id.index()]) return failf("op '{}' has no batch identifier", op.name);
    const std::optional<std::string>& id = batch[op.id.index()];
    const plan::TransAlgo algo = id ? plan::TransAlgo{plan::SplitAlgo{*id}} : plan::TransAlgo{plan::ReplicateAlgo{}};
    LOOM_ASSIGN_OR_RETURN(std::vector<SubOpId> parts, plan::trans(p, p.parts[op.id.index()].front(), algo, n));
    for (int k = 0; k < n; ++k) LOOM_RETURN_IF_ERROR(plan::assign(p, parts[static_cast<std::size_t>(k)], k));
  }
  return p;
}

// Empty when a run's `values` agree with the single-device `reference` to `tolerance` (compare_runs'
// relative error), else which tensor differs and by how much.
inline std::string disagreement(const ir::Graph& graph, const std::vector<NdArray>& reference, const std::vector<NdArray>& values,
                                double tolerance = 1e-9) {
  auto c = compare_runs(graph, reference, values);
  if (!c) return c.error().to_string();
  if (c->overall.max_rel <= tolerance) return {};
  return fmt::format("tensor '{}' differs: abs {:.3g} rel {:.3g}", c->overall.worst, c->overall.max_abs, c->overall.max_rel);
}

// Every device's program, for failure messages.
inline std::string programs_text(const exec::ExecPlan& exec) {
  std::string text;
  for (int d = 0; d < exec.num_devices; ++d) text += fmt::format("device {}:\n{}", d, exec::exec_to_text(exec, d));
  return text;
}

// One case: a graph (at a fixed address: the plan points at it), its leaves and single-device run, and a
// plan over `devices` devices; `log` records how the plan was made.
struct RandomCase {
  std::uint64_t seed = 0;
  std::unique_ptr<ir::Graph> graph;
  std::vector<NdArray> initial, reference;
  Plan plan;
  int devices = 1;
  std::string log;

  // The trans calls, the graph and the plan, for a failure message.
  std::string describe() const {
    return fmt::format("seed {}, {} devices\nplan made by:\n{}graph:\n{}plan:\n{}", seed, devices, log, ir::graph_to_text(*graph),
                       plan::plan_to_text(plan));
  }
};

// The case of `seed`. With `structured`, some cases try a pipeline (random_pipeline_plan) or data
// parallelism over 2 or 3 devices first: uniform layouts, where materialization uses collectives.
inline Expected<RandomCase> random_case(std::uint64_t seed, bool structured = false) {
  Rng rng(seed);
  RandomCase c;
  c.seed = seed;
  LOOM_ASSIGN_OR_RETURN(const ir::Graph forward, RandomGraph(rng).build());
  c.graph = std::make_unique<ir::Graph>(training(forward, rng));
  if (c.graph->ops.empty()) return failf("seed {}: no training graph", seed);
  c.initial = initial_values(*c.graph, seed);
  LOOM_ASSIGN_OR_RETURN(c.reference, with_context(run_graph(*c.graph, c.initial), ir::graph_to_text(*c.graph)));
  const int kind = structured ? rng.uniform(0, 99) : 100;
  if (kind < 30) {
    if (std::optional<Plan> p = random_pipeline_plan(*c.graph, rng, c.devices, c.log)) {
      c.plan = std::move(*p);
      return c;
    }
  } else if (kind < 55) {
    const int n = rng.uniform(2, 3);
    if (Expected<Plan> p = data_parallel(*c.graph, n); p && plan::validate_plan(*p, n)) {
      c.plan = std::move(*p);
      c.devices = n;
      c.log = fmt::format("data parallel over {} devices\n", n);
      return c;
    }
  }
  c.plan = random_plan(*c.graph, rng, c.devices, c.log);
  return c;
}

}  // namespace loom::verify::testing
