// How leaves (inputs, parameters, buffers, optimizer states) get their values in the verifying
// interpreter and in generated rank programs, which must agree element for element: the range an
// integer leaf is drawn from, and the parameter an optimizer state starts as a copy of.
#pragma once

#include <cstdint>

#include "loom/ir/graph.h"

namespace loom::ir {

// The range of an integer leaf: the vocabulary of an embedding it indexes, the class count of a loss
// it labels, followed through shape ops (a traced model views or slices its ids before the embedding);
// 2 otherwise (booleans, and integers nothing bounds).
std::int64_t integer_bound(const Graph& graph, TensorId id);

// The parameter whose fp32 master copy `id` is (input 2 of an optimizer step with master weights);
// invalid for moments and everything else.
TensorId master_copy_of(const Graph& graph, TensorId id);

}  // namespace loom::ir
