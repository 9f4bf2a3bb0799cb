// Private to the ExecPlan interpreter: the data semantics of the instructions that move or reshape data
// (include/loom/exec/exec_plan.h), as functions from input pieces to an output piece's values. The
// caller checks devices, buffer states and that every piece is of the output's FullTensor; these check
// what the data needs (boxes containing or covering the output) and name the offending piece.
#pragma once

#include <span>
#include <string_view>

#include "loom/core/error.h"
#include "loom/plan/sub_tensor.h"
#include "loom/verify/plan_interpreter.h"

namespace loom::verify::detail {

// Equal SubTensors up to how a strided range spells its stop (0:7:2 and 0:8:2 are one set).
bool same_piece(const plan::SubTensor& a, const plan::SubTensor& b);

// All-reduce, reduce-scatter: the sum of every input restricted to `output`'s box. Each input's box must
// contain the output's box.
Expected<NdArray> sum_collective(const plan::SubTensor& output, std::span<const PlanPiece> inputs);

// All-gather, all-to-all: each element of `output`'s box from the one input holding it. Inputs equal as
// pieces (replicas) count once; an element held by no input, or by two different pieces, is an error.
Expected<NdArray> gather_collective(const plan::SubTensor& output, std::span<const PlanPiece> inputs);

// Slice: the input restricted to the output's smaller box, same value part.
Expected<NdArray> slice_local(const plan::SubTensor& output, const PlanPiece& input);

// Scale: the input (same box) times output fraction / input fraction = input count / output count, so
// a whole input becomes "k of n" holding whole / n (R -> V) and back.
Expected<NdArray> scale_local(const plan::SubTensor& output, const PlanPiece& input);

// Combine: at each element, inputs tiling [0, 1), summed, times the output's fraction; failing that, the
// inputs whose value intervals tile the output's own, summed (assemble's Tiling::whole_or_part); failing
// that, inputs of the output's box that are k distinct parts of one count k x the output's, summed.
Expected<NdArray> combine_local(const plan::SubTensor& output, std::span<const PlanPiece> inputs,
                                std::string_view tensor_name);

// Accumulate: two or more inputs, each of the output's box, summed as is (one step of a running sum,
// exec_plan.h); an input of another box is an error.
Expected<NdArray> accumulate_local(const plan::SubTensor& output, std::span<const PlanPiece> inputs);

}  // namespace loom::verify::detail
