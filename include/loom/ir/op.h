// An Op is one operator instance of the program: a registry type applied to FullTensors.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/ir/attribute.h"
#include "loom/ir/ids.h"

namespace loom::ir {

enum class Pass : std::uint8_t { forward, backward, optimizer };

std::string_view name(Pass pass);
Expected<Pass> parse_pass(std::string_view text);

struct Op {
  OpId id;
  std::string name;  // hierarchical, from the model: "layers.3.attn.qkv"
  std::string type;  // registry type: "linear", "layer_norm", ...
  std::vector<TensorId> inputs;
  std::vector<TensorId> outputs;
  Attrs attrs;
  // The dimension annotation of this instance (see docs/annotations.md). For a backward op it is
  // the annotation of the forward op it mirrors: the plan transforms both the same way.
  std::string annotation;
  Pass pass = Pass::forward;
  // A backward op mirrors exactly one forward op (same type); invalid for every other op.
  OpId mirror_of;

  bool is_mirror() const { return mirror_of.valid(); }
  bool operator==(const Op&) const = default;
};

}  // namespace loom::ir
