// Embedding lookup. The vocabulary dim is a reduction: a shard of the table answers the ids it holds
// and zeros elsewhere, so the shards' outputs sum to the full lookup (vocabulary-parallel embedding).
#include "loom/ops/families.h"
#include "loom/ops/signature_helpers.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

Expected<OpSignature> embedding_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 2, 2, "embedding", "two inputs (ids, weight [v, h])"));
  LOOM_RETURN_IF_ERROR(expect_integer(call, 0, "embedding", "ids"));
  LOOM_RETURN_IF_ERROR(expect_rank(call, 1, 2, "embedding", "[v, h]"));
  const std::int64_t vocab = call.input_shapes[1][0];
  LOOM_ASSIGN_OR_RETURN(std::int64_t padding_idx, ir::get_int_or(call.attrs, "padding_idx", 0));
  if (padding_idx < -vocab || padding_idx >= vocab)
    return fail(fmt::format("embedding: padding_idx {} is outside a vocabulary of {}", padding_idx, vocab));
  std::vector<ir::DType> dtypes;
  if (call.input_dtypes.size() == 2) dtypes.push_back(call.input_dtypes[1]);
  return OpSignature{"*, v+ h -> * h", {}, std::move(dtypes)};
}

// A gather reads the ids and one table row per output row, not the whole table.
double embedding_bytes(const ir::OpInstance& op) {
  const double ids = static_cast<double>(op.inputs[0].numel() * ir::size_bytes(op.input_dtypes[0]));
  const double rows = static_cast<double>(op.outputs[0].numel() * ir::size_bytes(op.output_dtypes[0]));
  return ids + 2 * rows;
}

}  // namespace

void register_embedding_ops(OpRegistry& r) {
  r.add_builtin({.type = "embedding",
                 .family = "embedding",
                 .summary = "rows of weight [v, h] selected by integer ids: ids.shape + [h]",
                 .op_class = ir::OpClass::embedding,
                 .attrs = {{"padding_idx", ir::AttrKind::integer, false, "id whose row gets no gradient"}},
                 .signature = embedding_signature,
                 .flops = ir::no_flops(),
                 .bytes = embedding_bytes,
                 .backward = {.no_grad_inputs = {0}, .flops_factor = 1.0}});
}

}  // namespace loom::ops
