#include "exec_semantics.h"

#include <algorithm>
#include <functional>

#include "loom/core/strings.h"
#include "loom/verify/ndarray_ops.h"
#include "plan_assembly.h"

namespace loom::verify::detail {
namespace {

// Visits the global index of each element of `box`, in row-major local order.
void for_each_element(std::span<const plan::IndexRange> box, const std::function<void(std::span<const std::int64_t>)>& visit) {
  ir::Shape local;
  for (const plan::IndexRange& r : box) local.dims.push_back(r.size());
  std::vector<std::int64_t> at(box.size());
  for_each_index(local, [&](std::span<const std::int64_t> index) {
    for (std::size_t d = 0; d < index.size(); ++d) at[d] = box[d].start + index[d] * box[d].step;
    visit(at);
  });
}

bool box_contains(const plan::SubTensor& outer, const plan::SubTensor& inner) {
  if (outer.box.size() != inner.box.size()) return false;
  for (std::size_t d = 0; d < outer.box.size(); ++d)
    if (!plan::contains(outer.box[d], inner.box[d])) return false;
  return true;
}

std::string where(std::span<const std::int64_t> at) {
  std::vector<std::string> parts;
  for (std::int64_t i : at) parts.push_back(std::to_string(i));
  return "[" + join(parts, ", ") + "]";
}

// The input's values over the output's box, which the input's box must contain.
Expected<NdArray> restrict_to(const plan::SubTensor& output, const PlanPiece& input) {
  if (!box_contains(input.tensor, output))
    return fail(fmt::format("input {} does not contain the box of the output {}", input.tensor.to_string(), output.to_string()),
                "a sum or slice reads every output element from each input");
  NdArray out(output.local_shape());
  std::size_t next = 0;
  for_each_element(output.box, [&](std::span<const std::int64_t> at) {
    out.data[next++] = input.value.data[local_flat(input.tensor, at)];
  });
  return out;
}

}  // namespace

bool same_piece(const plan::SubTensor& a, const plan::SubTensor& b) {
  if (a.tensor != b.tensor || a.value != b.value || a.box.size() != b.box.size()) return false;
  for (std::size_t d = 0; d < a.box.size(); ++d)
    if (a.box[d].normalized() != b.box[d].normalized()) return false;
  return true;
}

Expected<NdArray> sum_collective(const plan::SubTensor& output, std::span<const PlanPiece> inputs) {
  NdArray out(output.local_shape());
  for (const PlanPiece& input : inputs) {
    LOOM_ASSIGN_OR_RETURN(NdArray part, restrict_to(output, input));
    for (std::size_t i = 0; i < out.data.size(); ++i) out.data[i] += part.data[i];
  }
  return out;
}

Expected<NdArray> gather_collective(const plan::SubTensor& output, std::span<const PlanPiece> inputs) {
  std::vector<std::size_t> distinct;  // first input of each distinct piece: replicas count once
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (std::none_of(distinct.begin(), distinct.end(), [&](std::size_t j) { return same_piece(inputs[i].tensor, inputs[j].tensor); }))
      distinct.push_back(i);
  NdArray out(output.local_shape());
  std::size_t next = 0;
  std::optional<Error> error;
  for_each_element(output.box, [&](std::span<const std::int64_t> at) {
    if (error) return;
    std::vector<std::size_t> holders;
    for (std::size_t i : distinct)
      if (holds(inputs[i].tensor, at)) holders.push_back(i);
    if (holders.size() != 1) {
      std::vector<std::string> found;
      for (std::size_t i : holders) found.push_back(inputs[i].tensor.to_string());
      error = Error{fmt::format("output {} element {} is held by {} distinct input pieces{}", output.to_string(), where(at),
                                holders.size(), holders.empty() ? "" : " (" + join(found, ", ") + ")"),
                    "a gather places each element from exactly one member's input"};
      return;
    }
    out.data[next++] = inputs[holders[0]].value.data[local_flat(inputs[holders[0]].tensor, at)];
  });
  if (error) return std::unexpected(*error);
  return out;
}

Expected<NdArray> slice_local(const plan::SubTensor& output, const PlanPiece& input) {
  if (output.value != input.tensor.value)
    return failf("slice of {} into {} changes the value part", input.tensor.to_string(), output.to_string());
  return restrict_to(output, input);
}

Expected<NdArray> scale_local(const plan::SubTensor& output, const PlanPiece& input) {
  plan::SubTensor same_box = input.tensor;
  same_box.value = output.value;
  if (!same_piece(same_box, output))
    return failf("scale of {} into {} changes the box", input.tensor.to_string(), output.to_string());
  // (1 / out.count) / (1 / in.count): exact for the small counts plans use.
  const double factor = static_cast<double>(input.tensor.value.count) / static_cast<double>(output.value.count);
  NdArray out = input.value;
  for (double& v : out.data) v *= factor;
  return out;
}

namespace {

// Inputs of the output's box that are k distinct parts of one decomposition of n = k x the output's count:
// their sum is a part of the coarser decomposition, which the output names (a local gradient accumulation).
bool parts_of_one_decomposition(const plan::SubTensor& output, std::span<const PlanPiece> inputs) {
  std::vector<std::int64_t> indices;
  for (const PlanPiece& input : inputs) {
    plan::SubTensor box = input.tensor;
    box.value = output.value;
    if (!same_piece(box, output) || input.tensor.value.count != inputs.front().tensor.value.count) return false;
    indices.push_back(input.tensor.value.index);
  }
  std::ranges::sort(indices);
  return std::ranges::adjacent_find(indices) == indices.end() &&
         static_cast<std::int64_t>(inputs.size()) * output.value.count == inputs.front().tensor.value.count;
}

}  // namespace

Expected<NdArray> combine_local(const plan::SubTensor& output, std::span<const PlanPiece> inputs, std::string_view tensor_name) {
  if (inputs.empty()) return failf("combine into {} has no inputs", output.to_string());
  Expected<NdArray> assembled = assemble(output, inputs, tensor_name, Tiling::whole_or_part);
  if (assembled || !parts_of_one_decomposition(output, inputs)) return assembled;
  return sum_collective(output, inputs);
}

Expected<NdArray> accumulate_local(const plan::SubTensor& output, std::span<const PlanPiece> inputs) {
  if (inputs.size() < 2)
    return failf("accumulate into {} has {} input; a running sum adds at least two", output.to_string(), inputs.size());
  for (const PlanPiece& input : inputs) {
    plan::SubTensor box = input.tensor;
    box.value = output.value;
    if (!same_piece(box, output))
      return failf("accumulate into {} reads {}, of another box", output.to_string(), input.tensor.to_string());
  }
  return sum_collective(output, inputs);
}

}  // namespace loom::verify::detail
