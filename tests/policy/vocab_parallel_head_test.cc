// Megatron's vocabulary-parallel LM head and cross entropy (Shoeybi et al. 2019, §3): under tensor
// parallelism each rank computes logits [.., v/tp] with its rows of the head's weight, and the loss
// (target_logit, cross_entropy_parts, cross_entropy_from_parts) exchanges per-token scalars only: the
// shift, the exponential sums and the target logits, never a vocabulary-wide tensor.
#include <gtest/gtest.h>

#include <string>

#include "testing/policy_plans.h"
#include "loom/ir/graph_builder.h"
#include "loom/models/transformer_blocks.h"
#include "loom/policy/tensor_parallel.h"
#include "policy_test_support.h"

namespace loom::policy {
namespace {

using exec::testing::policy_plan;
using exec::testing::shrunk_training_graph;
using testing::parts_of;

constexpr std::int64_t kVocab = models::TinyTransformer::vocab;

struct Case {
  const char* preset;
  const char* policy;
  ParallelConfig config;
};

const Case kCases[] = {{"gpt3-125m", "tp", {.tp = 2}},
                       {"gpt3-125m", "tp", {.tp = 4}},
                       {"gpt3-125m", "megatron", {.dp = 2, .tp = 2}},
                       {"llama3-8b", "tp", {.tp = 2}},
                       {"llama3-8b", "tp", {.tp = 4}},
                       {"llama3-8b", "megatron", {.dp = 2, .tp = 2}}};

std::string label(const Case& c) {
  return std::string(c.preset) + " " + c.policy + " dp " + std::to_string(c.config.dp) + " tp " +
         std::to_string(c.config.tp);
}

// Each part of the head and of the loss's vocabulary ops sees v/tp classes; their outputs are value
// parts (the ranks' shares of a per-token sum); the final mean sees whole per-token tensors.
TEST(VocabParallelHead, LogitsAreSplitAlongTheVocabulary) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(label(c));
    const plan::Plan p = testing::planned(c.preset, c.policy, c.config);
    ASSERT_NE(p.graph, nullptr);
    const std::int64_t share = kVocab / c.config.tp;
    const auto head = parts_of(p, "lm_head");
    ASSERT_EQ(head.size(), static_cast<std::size_t>(c.config.dp * c.config.tp));
    for (const plan::SubOp* s : head) {
      const ir::Shape logits = s->outputs[0].local_shape();
      EXPECT_EQ(logits.dims.back(), share) << logits.to_string();
      EXPECT_EQ(s->inputs[1].local_shape()[0], share);  // the weight's rows: this rank's vocabulary
    }
    for (const char* name : {"loss_shift", "loss_parts"}) {
      const auto parts = parts_of(p, name);
      ASSERT_EQ(parts.size(), head.size()) << name;
      for (const plan::SubOp* s : parts) {
        EXPECT_EQ(s->inputs[0].local_shape().dims.back(), share) << name;
        for (const plan::SubTensor& out : s->outputs) {
          EXPECT_EQ(out.value.count, c.config.tp) << name;
          EXPECT_EQ(out.local_shape().rank(), 2u) << name;  // [b s]: per token
        }
      }
    }
    for (const plan::SubOp* s : parts_of(p, "loss"))
      for (const plan::SubTensor& in : s->inputs) EXPECT_TRUE(in.value.is_whole());
  }
}

// The loss's collectives move per-token scalars: three forward all-reduces of [b s] per tp group
// (shift, sums, targets), none in backward; no collective moves the logits or their gradient.
TEST(VocabParallelHead, LossCollectivesArePerTokenScalars) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(label(c));
    const ir::Graph& graph = shrunk_training_graph(c.preset, ir::DType::f32);
    const auto pp = policy_plan(graph, c.policy, c.config);
    const exec::ExecPlan& exec = pp->exec;
    const std::vector<ir::OpId> producers = ir::producers(graph);
    // The forward op whose output (or its gradient) a collective tag moves; nullptr for inputs and parameters.
    const auto producer_of = [&](std::int64_t tag) -> const ir::Op* {
      const ir::FullTensor& t = graph.tensor(exec.collectives[static_cast<std::size_t>(tag)].tensor);
      const ir::TensorId forward = t.role == ir::TensorRole::gradient ? t.owner : t.id;
      return producers[forward.index()].valid() ? &graph.op(producers[forward.index()]) : nullptr;
    };
    int loss_forward = 0, loss_backward = 0;
    for (std::size_t tag = 0; tag < exec.collectives.size(); ++tag) {
      const exec::CollectiveInfo& info = exec.collectives[tag];
      if (!info.tensor.valid() || info.rule.find("all-reduce") == std::string::npos) continue;
      const ir::Op* producer = producer_of(static_cast<std::int64_t>(tag));
      if (producer == nullptr) continue;
      EXPECT_NE(producer->name, "lm_head") << graph.tensor(info.tensor).name << " is vocabulary-wide";
      if (!producer->name.starts_with("loss")) continue;
      (graph.tensor(info.tensor).role == ir::TensorRole::gradient ? loss_backward : loss_forward) += 1;
    }
    EXPECT_EQ(loss_forward, 3 * c.config.dp);
    EXPECT_EQ(loss_backward, 0);
    // What the devices' programs move for the loss: one value per token at most.
    for (const auto& program : exec.programs)
      for (const exec::Instruction& instruction : program) {
        const auto* collective = std::get_if<exec::Collective>(&instruction);
        if (collective == nullptr) continue;
        const ir::Op* producer = producer_of(collective->tag);
        if (producer == nullptr || !producer->name.starts_with("loss")) continue;
        const ir::Shape piece = exec.buffers[collective->input.index()].piece.local_shape();
        EXPECT_EQ(piece.rank(), 2u) << piece.to_string();
        EXPECT_LE(piece.numel(), models::TinyTransformer::batch * models::TinyTransformer::seq);
      }
  }
}

TEST(VocabParallelHead, TrainsExactly) {
  for (const Case& c : kCases) testing::expect_trains_exactly(c.preset, c.policy, c.config);
}

// ids -> embedding [vocab, 8] -> tied linear head -> the language-model loss.
ir::Graph tiny_language_model(std::int64_t vocab) {
  ir::GraphBuilder b("tiny_lm", ops::builtin_ops());
  const ir::TensorId ids = b.input("input_ids", {4, 8}, ir::DType::i64);
  const ir::TensorId labels = b.input("labels", {4, 8}, ir::DType::i64);
  const ir::TensorId table = b.parameter("wte.weight", {vocab, 8}, ir::DType::f32);
  const ir::TensorId x = b.op("embedding", "wte", {ids, table});
  models::language_model_loss(b, b.op("linear", "lm_head", {x, table}), labels);
  auto graph = std::move(b).finish();
  EXPECT_TRUE(graph) << graph.error().to_string();
  auto training = ir::build_training_graph(graph.value_or(ir::Graph{}), ops::builtin_ops(), {});
  EXPECT_TRUE(training) << training.error().to_string();
  return training.value_or(ir::Graph{});
}

// A vocabulary tp does not divide (GPT's 50257 unpadded) keeps the head replicated, like its
// embedding, instead of failing; one it divides is split.
TEST(VocabParallelHead, AnIndivisibleVocabularyStaysReplicated) {
  for (const auto& [vocab, split] : {std::pair{std::int64_t{10}, false}, std::pair{std::int64_t{12}, true}}) {
    SCOPED_TRACE(vocab);
    const ir::Graph graph = tiny_language_model(vocab);
    auto p = plan::make_plan(graph, ops::builtin_ops());
    ASSERT_TRUE(p) << p.error().to_string();
    auto layout = tensor_parallel_layout(*p, 4);
    ASSERT_TRUE(layout) << layout.error().to_string();
    for (const char* name : {"wte", "lm_head", "loss_shift", "loss_parts"}) {
      const ir::Op* op = testing::op_named(*p, name);
      ASSERT_NE(op, nullptr);
      EXPECT_EQ(layout->splits[op->id.index()].has_value(), split) << name;
    }
  }
}

}  // namespace
}  // namespace loom::policy
