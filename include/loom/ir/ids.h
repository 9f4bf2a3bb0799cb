#pragma once

#include "loom/core/strong_id.h"

namespace loom::ir {

struct TensorTag;
struct OpTag;
using TensorId = StrongId<TensorTag>;  // index into Graph::tensors
using OpId = StrongId<OpTag>;          // index into Graph::ops

}  // namespace loom::ir
