#include "loom/ops/signature_helpers.h"

#include <algorithm>

#include "loom/core/strings.h"

namespace loom::ops {

std::string annotation_text(const std::vector<TensorDims>& inputs, const std::vector<TensorDims>& outputs) {
  const auto side = [](const std::vector<TensorDims>& tensors) {
    std::vector<std::string> parts;
    for (const TensorDims& t : tensors) parts.push_back(join(t, " "));
    return join(parts, ", ");
  };
  return side(inputs) + " -> " + side(outputs);
}

TensorDims indexed_dims(std::size_t rank, std::string_view prefix) {
  TensorDims dims;
  for (std::size_t d = 0; d < rank; ++d) dims.push_back(fmt::format("{}{}", prefix, d));
  return dims;
}

TensorDims flagged(TensorDims dims, char flag) {
  for (std::string& d : dims) d += flag;
  return dims;
}

TensorDims token_dims(std::size_t count) {
  if (count == 1) return {"n"};
  if (count == 2) return {"b", "s"};
  return indexed_dims(count);
}

Expected<void> check_label_smoothing(const ir::OpCall& call, std::string_view op) {
  LOOM_ASSIGN_OR_RETURN(double smoothing, ir::get_real_or(call.attrs, "label_smoothing", 0.0));
  if (!(smoothing >= 0 && smoothing < 1))
    return fail(fmt::format("{}: label_smoothing {} is outside [0, 1)", op, smoothing));
  return {};
}

ir::OpDef loss_op(std::string type, std::string summary, ir::SignatureFn signature, ir::CostFn flops,
                  std::vector<ir::AttrSpec> attrs, std::vector<int> no_grad) {
  return {.type = std::move(type),
          .family = "loss",
          .summary = std::move(summary),
          .op_class = ir::OpClass::loss,
          .attrs = std::move(attrs),
          .signature = std::move(signature),
          .flops = std::move(flops),
          .backward = {.no_grad_inputs = std::move(no_grad), .flops_factor = 1.0}};
}

std::string letter_name(std::size_t index) {
  const char letter = static_cast<char>('a' + index % 26);
  return index < 26 ? std::string(1, letter) : fmt::format("{}{}", letter, index / 26);
}

Expected<std::size_t> normalize_dim(std::int64_t dim, std::size_t rank, std::string_view op) {
  const auto r = static_cast<std::int64_t>(rank);
  if (dim < -r || dim >= r)
    return fail(fmt::format("{}: dim {} is out of range for a tensor of rank {}", op, dim, rank),
                rank == 0 ? std::string("a scalar has no dims") : fmt::format("use a dim in [{}, {}]", -r, r - 1));
  return static_cast<std::size_t>(dim < 0 ? dim + r : dim);
}

Expected<void> expect_inputs(const ir::OpCall& call, std::size_t min, std::size_t max, std::string_view op,
                             std::string_view forms) {
  const std::size_t n = call.input_shapes.size();
  if (n < min || n > max) return fail(fmt::format("{} takes {}, got {} inputs", op, forms, n));
  return {};
}

Expected<void> expect_rank(const ir::OpCall& call, std::size_t index, std::size_t rank, std::string_view op,
                           std::string_view layout) {
  const ir::Shape& shape = call.input_shapes[index];
  if (shape.rank() != rank)
    return fail(fmt::format("{}: input {} must have rank {} {}, got shape {}", op, index, rank, layout,
                            shape.to_string()));
  return {};
}

bool is_integer(ir::DType dtype) {
  using ir::DType;
  return dtype == DType::i64 || dtype == DType::i32 || dtype == DType::i8 || dtype == DType::u8;
}

Expected<void> expect_integer(const ir::OpCall& call, std::size_t index, std::string_view op, std::string_view role) {
  if (index < call.input_dtypes.size() && !is_integer(call.input_dtypes[index]))
    return fail(fmt::format("{}: input {} ({}) must hold integers, got {}", op, index, role,
                            ir::name(call.input_dtypes[index])),
                "cast it to i64");
  return {};
}

Expected<void> expect_boolean(const ir::OpCall& call, std::size_t index, std::string_view op, std::string_view role) {
  if (index < call.input_dtypes.size() && call.input_dtypes[index] != ir::DType::boolean)
    return fail(fmt::format("{}: input {} ({}) must be bool, got {}", op, index, role, ir::name(call.input_dtypes[index])),
                "compare it to produce a bool mask");
  return {};
}

Expected<Broadcast> broadcast_dims(std::span<const ir::Shape> shapes, std::string_view op) {
  std::size_t rank = 0;
  for (const ir::Shape& s : shapes) rank = std::max(rank, s.rank());
  std::vector<std::int64_t> sizes(rank, 1);
  for (const ir::Shape& s : shapes)
    for (std::size_t k = 0; k < s.rank(); ++k) {
      std::int64_t& out = sizes[rank - s.rank() + k];
      if (s[k] == out || s[k] == 1) continue;
      if (out != 1) {
        std::vector<std::string> all;
        for (const ir::Shape& t : shapes) all.push_back(t.to_string());
        return fail(fmt::format("{}: shapes {} do not broadcast (size {} against {} at output dim {})", op,
                                join(all, " and "), s[k], out, rank - s.rank() + k),
                    "each dim must match or be 1");
      }
      out = s[k];
    }
  Broadcast result;
  result.output = indexed_dims(rank);
  for (const ir::Shape& s : shapes) {
    TensorDims dims;
    for (std::size_t k = 0; k < s.rank(); ++k) {
      const std::size_t axis = rank - s.rank() + k;
      dims.push_back(s[k] == 1 && sizes[axis] != 1 ? std::string("1") : result.output[axis]);
    }
    result.inputs.push_back(std::move(dims));
  }
  return result;
}

}  // namespace loom::ops
