// A FullTensor is a logical tensor of the single-device program (DESIGN.md, core concepts).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include <string_view>

#include "loom/core/error.h"
#include "loom/ir/dtype.h"
#include "loom/ir/ids.h"
#include "loom/ir/shape.h"

namespace loom::ir {

enum class TensorRole : std::uint8_t { input, parameter, activation, gradient, optimizer_state, buffer };

std::string_view name(TensorRole role);
Expected<TensorRole> parse_tensor_role(std::string_view text);

// An input whose value its provider computes from another input of the same step rather than being given
// it (ir/derived_input.h). counted_tokens: how many elements of `from` (an integer input, the labels) inside
// the window are not ignore_index; the window drops trim[d] = {front, back} elements of each dim (a
// causal LM's loss reads labels[:, 1:]). The value is a whole-batch scalar, so every micro-batch and
// replica divides by the same count and no split of the loss waits for another's labels.
struct DerivedInput {
  TensorId from;
  std::int64_t ignore_index = -100;
  std::vector<std::array<std::int64_t, 2>> trim;  // per dim of `from`; empty: nothing dropped
  bool operator==(const DerivedInput&) const = default;
};

struct FullTensor {
  TensorId id;
  std::string name;
  Shape shape;
  DType dtype = DType::f32;
  TensorRole role = TensorRole::activation;
  // What this tensor belongs to: for a gradient, the tensor it is the gradient of; for an optimizer
  // state, its parameter. Invalid otherwise.
  TensorId owner;
  // Set when this tensor is the value of another one after the optimizer step (SSA versions of a
  // parameter or optimizer state). Invalid otherwise.
  TensorId updates;
  // A buffer's constant elements, row-major (a traced model's position ids, a GELU coefficient): the
  // program's own numbers, which the interpreter and generated programs load. Empty: drawn as any leaf.
  std::vector<double> value;
  // Set for an input computed from another input (a loss's counted-token count); absent otherwise.
  std::optional<DerivedInput> derived;

  std::int64_t bytes() const { return shape.numel() * size_bytes(dtype); }
  bool operator==(const FullTensor&) const = default;
};

}  // namespace loom::ir
