// Shared by the policy tests: shrunk training graphs (built once per preset), their reference runs,
// and the check that a policy's plan validates and trains exactly as one device.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "testing/policy_plans.h"
#include "loom/ir/autograd.h"
#include "loom/ir/graph_json.h"
#include "loom/models/zoo.h"
#include "loom/ops/registry.h"
#include "loom/plan/plan.h"
#include "loom/plan/validate.h"
#include "loom/policy/policy.h"
#include "loom/verify/closed_step.h"
#include "loom/verify/exec_interpreter.h"
#include "loom/verify/graph_interpreter.h"
#include "loom/verify/plan_interpreter.h"

namespace loom::policy::testing {

// A shrunk preset's float32 training graph (SGD: Adam would turn the rounding noise of a
// mathematically zero gradient into full-size updates), its initial values and the reference run.
struct Model {
  ir::Graph graph;
  std::vector<verify::NdArray> initial;
  std::vector<verify::NdArray> reference;
};

inline const Model& shrunk(std::string_view preset) {
  static std::map<std::string, std::unique_ptr<Model>, std::less<>> cache;
  if (auto it = cache.find(preset); it != cache.end()) return *it->second;
  auto model = std::make_unique<Model>();
  auto forward = models::build_model(preset, {.dtype = ir::DType::f32, .shrink = true});
  EXPECT_TRUE(forward) << preset << ": " << forward.error().to_string();
  if (forward) {
    auto training =
        ir::build_training_graph(*forward, ops::builtin_ops(), {.kind = ir::OptimizerKind::sgd, .lr = 0.1});
    EXPECT_TRUE(training) << preset << ": " << training.error().to_string();
    if (training) {
      model->graph = std::move(*training);
      model->initial = verify::initial_values(model->graph, 11);
      auto reference = verify::run_graph(model->graph, model->initial);
      EXPECT_TRUE(reference) << preset << ": " << reference.error().to_string();
      if (reference) model->reference = std::move(*reference);
    }
  }
  return *cache.emplace(std::string(preset), std::move(model)).first->second;
}

// A preset with `layers` layers (shrunk unless told otherwise) as an SGD training graph, built once per
// (preset, layers, shrink).
inline const ir::Graph& deep(const std::string& preset, int layers, bool shrink = true) {
  static std::map<std::tuple<std::string, int, bool>, std::unique_ptr<ir::Graph>> cache;
  auto& slot = cache[{preset, layers, shrink}];
  if (!slot) {
    auto forward = models::build_model(preset, {.dtype = ir::DType::f32, .layers = layers, .shrink = shrink});
    EXPECT_TRUE(forward) << forward.error().to_string();
    auto training = forward ? ir::build_training_graph(*forward, ops::builtin_ops(), {.kind = ir::OptimizerKind::sgd})
                            : Expected<ir::Graph>(ir::Graph{});
    EXPECT_TRUE(training) << training.error().to_string();
    slot = std::make_unique<ir::Graph>(training.value_or(ir::Graph{}));
  }
  return *slot;
}

// A gpt3-125m of `layers` layers with a small vocabulary (the LM head's logits do not set the peak),
// seq 256, f16, as a training graph.
inline const ir::Graph& small_vocab_gpt(int layers) {
  static std::map<int, std::unique_ptr<ir::Graph>> graphs;
  auto& slot = graphs[layers];
  if (!slot) {
    auto forward = models::build_model(
        "gpt3-125m", {.batch = 1, .seq = 256, .dtype = ir::DType::f16, .layers = layers, .vocab = 1024});
    EXPECT_TRUE(forward) << forward.error().to_string();
    auto graph = forward ? ir::build_training_graph(*forward, ops::builtin_ops(), {}) : Expected<ir::Graph>(ir::Graph{});
    EXPECT_TRUE(graph) << graph.error().to_string();
    slot = std::make_unique<ir::Graph>(graph.value_or(ir::Graph{}));
  }
  return *slot;
}

// A fresh plan of the shrunk preset with `policy` applied; fails the test on any error.
inline plan::Plan planned(std::string_view preset, std::string_view policy, const ParallelConfig& config) {
  const Model& model = shrunk(preset);
  auto made = plan::make_plan(model.graph, ops::builtin_ops());
  EXPECT_TRUE(made) << made.error().to_string();
  if (!made) return {};
  auto applied = apply_policy(*made, policy, config);
  EXPECT_TRUE(applied) << preset << " / " << policy << ": " << applied.error().to_string();
  return std::move(*made);
}

// The micro-batch of a staged sub-op, from its name's first part ("decoder.layers.1.cross_attn.kv[3/4]..."),
// -1 for another op (T5 and mBART name their staged layers encoder.layers.* and decoder.layers.*).
inline int staged_micro_batch(const plan::SubOp& s, std::string_view op_name, int micro_batches) {
  if (!op_name.starts_with("encoder.layers.") && !op_name.starts_with("decoder.layers.")) return -1;
  const std::string suffix = fmt::format("/{}]", micro_batches);
  const std::size_t open = s.name.find('['), close = s.name.find(suffix);
  if (open == std::string::npos || close == std::string::npos || close < open) return -1;
  return std::stoi(s.name.substr(open + 1, close - open - 1));
}

// The plan validates on device_count(config) devices and trains as the single-device reference does,
// within 1e-9 relative on every activation, gradient, updated tensor and the loss.
inline void expect_trains_exactly(std::string_view preset, std::string_view policy, const ParallelConfig& config) {
  SCOPED_TRACE(std::string(preset) + " / " + std::string(policy));
  const Model& model = shrunk(preset);
  ASSERT_FALSE(model.reference.empty());
  const plan::Plan p = planned(preset, policy, config);
  ASSERT_NE(p.graph, nullptr);
  const int devices = device_count(config);
  const auto valid = plan::validate_plan(p, devices);
  ASSERT_TRUE(valid) << valid.error().to_string();
  auto run = verify::run_plan(p, devices, model.initial);
  ASSERT_TRUE(run) << run.error().to_string();
  auto c = verify::compare_runs(model.graph, model.reference, run->values);
  ASSERT_TRUE(c) << c.error().to_string();
  for (const auto& [role, stat] : {std::pair{"activation", c->activation}, std::pair{"gradient", c->gradient},
                                   std::pair{"updated", c->updated}, std::pair{"loss", c->loss}})
    EXPECT_LT(stat.max_rel, 1e-9) << role << ": " << stat.worst << " rel " << stat.max_rel;
}

// A planned graph (not a preset) validates on `devices` and trains as one device within 1e-9 relative
// (updated tensors and the loss), from the seeded initial values.
inline void expect_plan_trains_as_one_device(const plan::Plan& p, int devices, std::uint64_t seed = 3) {
  const ir::Graph& graph = *p.graph;
  const auto initial = verify::initial_values(graph, seed);
  auto reference = verify::run_graph(graph, initial);
  ASSERT_TRUE(reference) << reference.error().to_string();
  const auto valid = plan::validate_plan(p, devices);
  ASSERT_TRUE(valid) << valid.error().to_string();
  auto run = verify::run_plan(p, devices, initial);
  ASSERT_TRUE(run) << run.error().to_string();
  auto compared = verify::compare_runs(graph, *reference, run->values);
  ASSERT_TRUE(compared) << compared.error().to_string();
  EXPECT_LT(compared->updated.max_rel, 1e-9) << compared->updated.worst;
  EXPECT_LT(compared->loss.max_rel, 1e-9);
}

// `policy` on `graph`, materialized (tests/exec/policy_plans.h), trains as one device within 1e-9 relative
// on every tensor from the seeded initial values, and ends the step where the next one loads it.
inline void expect_exec_trains_as_one_device(const ir::Graph& graph, std::string_view policy,
                                             const ParallelConfig& config, std::uint64_t seed = 7) {
  SCOPED_TRACE(std::string(policy) + " dp " + std::to_string(config.dp) + " tp " + std::to_string(config.tp) +
               " micro-batches " + std::to_string(config.micro_batches) + " zero " + std::to_string(config.zero));
  const auto initial = verify::initial_values(graph, seed);
  auto reference = verify::run_graph(graph, initial);
  ASSERT_TRUE(reference) << reference.error().to_string();
  const auto p = exec::testing::policy_plan(graph, policy, config);
  auto run = verify::run_exec_plan(p->exec, initial);
  ASSERT_TRUE(run) << run.error().to_string();
  auto compared = verify::compare_runs(graph, *reference, run->values);
  ASSERT_TRUE(compared) << compared.error().to_string();
  EXPECT_LT(compared->overall.max_rel, 1e-9) << compared->overall.worst;
  auto closed = verify::check_closed_step(p->exec, *run, *reference);
  ASSERT_TRUE(closed) << closed.error().to_string();
  EXPECT_LT(closed->error.max_rel, 1e-9) << closed->error.worst;
}

// The most activation bytes any device holds at once (buffers live from their write to their free).
inline std::int64_t peak_activation_bytes(const exec::ExecPlan& exec) {
  const ir::Graph& graph = *exec.plan->graph;
  const auto activation = [&](exec::BufferId b) {
    const exec::Buffer& buffer = exec.buffer(b);
    return graph.tensor(buffer.piece.tensor).role == ir::TensorRole::activation ? buffer.bytes : 0;
  };
  std::int64_t peak = 0;
  for (const auto& program : exec.programs) {
    std::int64_t live = 0;
    for (const exec::Instruction& instruction : program) {
      if (const auto* c = std::get_if<exec::Compute>(&instruction))
        for (exec::BufferId b : c->outputs) live += activation(b);
      else if (const auto* col = std::get_if<exec::Collective>(&instruction)) live += activation(col->output);
      else if (const auto* r = std::get_if<exec::Recv>(&instruction)) live += activation(r->buffer);
      else if (const auto* l = std::get_if<exec::Local>(&instruction)) live += activation(l->output);
      else if (const auto* f = std::get_if<exec::Free>(&instruction)) live -= activation(f->buffer);
      peak = std::max(peak, live);
    }
  }
  return peak;
}

// The error `policy` gives on the shrunk preset (a test failure when it succeeds).
inline Error apply_error(std::string_view preset, std::string_view policy, const ParallelConfig& config) {
  auto made = plan::make_plan(shrunk(preset).graph, ops::builtin_ops());
  EXPECT_TRUE(made);
  auto applied = apply_policy(*made, policy, config);
  EXPECT_FALSE(applied) << policy << " on " << preset << " should fail";
  return applied ? Error{} : applied.error();
}

// Every word occurs in the error's text.
inline void expect_mentions(const Error& e, std::initializer_list<std::string_view> words) {
  const std::string text = e.to_string();
  for (std::string_view w : words) EXPECT_NE(text.find(w), std::string::npos) << "'" << w << "' not in: " << text;
}

// The traced HuggingFace GPT-2 fixture (tests/policy/traced_gpt2.json: n_layer 2, n_embd 64, n_head 4,
// vocab 128, batch [4, 16]) as a training graph (AdamW), read once.
inline const ir::Graph& traced_gpt2_training_graph() {
  static const ir::Graph graph = [] {
    std::ifstream in(std::string(LOOM_SOURCE_DIR) + "/tests/policy/traced_gpt2.json");
    std::stringstream text;
    text << in.rdbuf();
    auto forward = ir::graph_from_json(text.str());
    EXPECT_TRUE(forward) << forward.error().to_string();
    auto training = forward ? ir::build_training_graph(*forward, ops::builtin_ops(), {}) : Expected<ir::Graph>(ir::Graph{});
    EXPECT_TRUE(training) << training.error().to_string();
    return training.value_or(ir::Graph{});
  }();
  return graph;
}

inline const ir::Op* op_named(const plan::Plan& p, std::string_view name) {
  for (const ir::Op& op : p.graph->ops)
    if (op.name == name) return &op;
  ADD_FAILURE() << "no op '" << name << "'";
  return nullptr;
}

// The live parts of an op, in creation order.
inline std::vector<const plan::SubOp*> parts_of(const plan::Plan& p, std::string_view name) {
  std::vector<const plan::SubOp*> parts;
  if (const ir::Op* op = op_named(p, name))
    for (plan::SubOpId id : p.parts[op->id.index()]) parts.push_back(&p.sub_op(id));
  return parts;
}

inline std::vector<int> devices_of(const std::vector<const plan::SubOp*>& parts) {
  std::vector<int> devices;
  for (const plan::SubOp* s : parts) devices.push_back(s->device);
  return devices;
}

}  // namespace loom::policy::testing
