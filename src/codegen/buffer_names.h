// Private to codegen: Python variable names for an ExecPlan's buffers, from the tensor they hold and
// a per-device counter ("layers_0_mlp_fc1__0"), and Python literals for pieces.
#pragma once

#include <string>
#include <vector>

#include "loom/exec/exec_plan.h"

namespace loom::codegen::detail {

// A valid, non-keyword Python identifier spelling `name`: every other character becomes '_'.
std::string python_identifier(std::string_view name);

// By BufferId: the variable of each buffer on its own device, unique within that device's module.
std::vector<std::string> buffer_variables(const exec::ExecPlan& exec);

// "((0, 4, 1), (0, 8, 2))": the box as (start, stop, step) triples, stop normalized.
std::string box_literal(const plan::SubTensor& piece);
// "(((0, 4, 1),), (1, 2))": the box and the value part (index, count).
std::string piece_literal(const plan::SubTensor& piece);
// A Python string literal.
std::string python_string(std::string_view text);

}  // namespace loom::codegen::detail
