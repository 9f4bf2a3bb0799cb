// Test support shared by the policy and sim tests: a nanoGPT-style GPT whose LM head is tied to the token
// embedding or not, as HuggingFace's GPT-2 is traced (tests/policy/traced_gpt2.json): the loss is one
// cross_entropy over a frozen vocabulary, so tensor parallelism splits the embedding along the
// vocabulary while the head stays whole on every tp rank. Tied, the table's gradient is the sum of two
// partial gradients (the embedding's and the head's) that an "accumulate" op adds.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "loom/ir/autograd.h"
#include "loom/ir/graph_builder.h"
#include "loom/models/transformer_blocks.h"
#include "loom/ops/registry.h"

namespace loom::policy::testing {

struct TiedGptShape {
  std::int64_t layers = 2;
  std::int64_t hidden = 16;
  std::int64_t heads = 4;
  std::int64_t vocab = 64;
  std::int64_t seq = 8;
  std::int64_t batch = 8;
  ir::DType dtype = ir::DType::f32;
};

// The training graph (AdamW); `tied`: the head reads "wte.weight", else its own "lm_head.weight".
inline ir::Graph tied_gpt(bool tied, const TiedGptShape& shape = {}) {
  ir::GraphBuilder b(tied ? "tied-gpt" : "untied-gpt", ops::builtin_ops());
  const ir::TensorId ids = b.input("input_ids", {shape.batch, shape.seq}, ir::DType::i64);
  const ir::TensorId labels = b.input("labels", {shape.batch, shape.seq}, ir::DType::i64);
  auto [x, wte] = models::learned_embeddings(b, ids, shape.vocab, shape.seq, shape.hidden, 0, shape.dtype);
  const models::NormSpec layer_norm{};
  const models::AttentionSpec attention{.hidden = shape.hidden, .heads = shape.heads, .causal = true};
  const models::MlpSpec ffn{.hidden = shape.hidden, .ffn = 4 * shape.hidden};
  for (std::int64_t i = 0; i < shape.layers; ++i) {
    auto layer = b.scope("layers." + std::to_string(i));
    x = models::pre_norm_block(b, x, layer_norm, attention, shape.dtype, "mlp", "mlp_residual",
                               [&](ir::TensorId n) { return models::mlp(b, n, ffn, shape.dtype); });
  }
  x = models::norm(b, "ln_f", x, shape.hidden, layer_norm, shape.dtype);
  const ir::TensorId head = tied ? wte : b.parameter("lm_head.weight", {shape.vocab, shape.hidden}, shape.dtype);
  const ir::TensorId logits = b.op("linear", "lm_head", {x, head});
  b.set_loss(b.op("cross_entropy", "loss", {logits, labels}));
  auto forward = std::move(b).finish();
  EXPECT_TRUE(forward) << forward.error().to_string();
  if (!forward) return {};
  auto training = ir::build_training_graph(*forward, ops::builtin_ops(), {});
  EXPECT_TRUE(training) << training.error().to_string();
  return training.value_or(ir::Graph{});
}

}  // namespace loom::policy::testing
