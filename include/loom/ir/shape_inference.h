// Shape inference from a dimension annotation: bind every identifier to a size from the input
// shapes (plus sizes the operator supplies from its attributes), then build the output shapes.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/ir/annotation.h"
#include "loom/ir/shape.h"

namespace loom::ir {

using SizeMap = std::map<std::string, std::int64_t, std::less<>>;

struct DimBinding {
  SizeMap sizes;                       // identifier -> size
  std::vector<std::int64_t> variadic;  // the dims '*' stands for (empty when unused or zero-length)

  std::int64_t size(std::string_view identifier) const;  // 0 if unbound
  // Product of every identifier's size and of the variadic dims: the iteration space of the op.
  double iteration_space() const;
};

// Binds identifiers from the input shapes. `known` supplies sizes the inputs alone cannot give
// (a reshape's target, the head count in "(h d)"). Opaque '?' inputs are skipped.
Expected<DimBinding> bind_dims(const Annotation& annotation, std::span<const Shape> inputs,
                               const SizeMap& known = {});

// Output shapes under a binding.
Expected<std::vector<Shape>> output_shapes(const Annotation& annotation, const DimBinding& binding);

// bind_dims then output_shapes.
Expected<std::vector<Shape>> infer_shapes(const Annotation& annotation, std::span<const Shape> inputs,
                                          const SizeMap& known = {});

}  // namespace loom::ir
