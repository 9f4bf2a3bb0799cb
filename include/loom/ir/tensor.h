// A FullTensor is a logical tensor of the single-device program (DESIGN.md, core concepts).
#pragma once

#include <cstdint>
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

  std::int64_t bytes() const { return shape.numel() * size_bytes(dtype); }
  bool operator==(const FullTensor&) const = default;
};

}  // namespace loom::ir
