// The Python face of a plan under construction (class Plan): the training graph's ops and tensors as a
// policy reads them, the plan's sub-ops, and the three primitives (plan/primitives.h) that change it.
// A policy function receives one for the job's fresh plan; it is valid only while that function runs.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <pybind11/pybind11.h>

#include "loom/ir/op_def.h"
#include "loom/plan/plan.h"

namespace loom::bindings {

// The job's plan while the policy function runs; `plan` is reset when it returns, so a Plan kept past it
// raises PlanError instead of touching a plan the engine has moved on with.
struct PlanView {
  plan::Plan* plan = nullptr;
  const ir::OpCatalog* catalog = nullptr;

  // The plan, or PlanError when the policy function has returned.
  plan::Plan& get() const;
  // The sub-op of a Python id, or PlanError naming the id (out of range, or a dead sub-op when `live`).
  plan::SubOpId sub_op(std::int64_t id, bool live = true) const;
  ir::OpId op(std::int64_t id) const;
  ir::TensorId tensor(std::int64_t id) const;
};
using PlanHandle = std::shared_ptr<PlanView>;

// Sub-op ids as Python ints.
std::vector<std::int64_t> ids_of(const std::vector<plan::SubOpId>& list);

// Registers Plan, Op, Tensor, SubOp, SubTensor and the algorithms Split, Replicate and ValueSplit.
void bind_plan(pybind11::module_& module);

}  // namespace loom::bindings
