// A Plan: the training Graph's ops transformed into sub-ops, each reading and writing SubTensors,
// assigned to devices and partially ordered (DESIGN.md, "Primitives"). It starts with one sub-op per
// op covering whole tensors; trans / assign / order (primitives.h) change it; validate_plan checks it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/strong_id.h"
#include "loom/ir/annotation.h"
#include "loom/ir/graph.h"
#include "loom/ir/op_def.h"
#include "loom/plan/sub_tensor.h"

namespace loom::plan {

struct SubOpTag;
using SubOpId = StrongId<SubOpTag>;
inline constexpr int kUnassigned = -1;
enum class Residence : std::uint8_t;  // plan/residence.h

struct SubOp {
  SubOpId id;
  ir::OpId op;                     // the graph op this is a part of
  std::string name;                // op name plus the parts taken: "layers.0.mlp.fc1[1/2]"
  std::vector<SubTensor> inputs;   // aligned with the op's inputs
  std::vector<SubTensor> outputs;  // aligned with the op's outputs
  int device = kUnassigned;
  SubOpId mirror;                  // forward part <-> its backward part (the input part B when split)
  // A forward part's weight part W when its backward op is split (ir::split_weight_gradients); a W
  // part's `mirror` is its forward part, as a backward part's is.
  SubOpId weight_mirror;
  bool live = true;                // false once transformed into parts

  bool operator==(const SubOp&) const = default;
};

// What trans needs of each op, resolved once: its annotation with '*' expanded into identifiers
// "*0", "*1", ... (one per dimension it stands for), and its additive inputs.
struct OpLayout {
  ir::Annotation annotation;
  std::vector<int> additive_inputs;
  std::vector<int> shape_only_inputs;  // read for their shape alone: no data dependency
  bool linear = false;                 // ir::OpDef::linear: may be split by value

  bool shape_only(std::size_t input) const;
};

struct Plan {
  const ir::Graph* graph = nullptr;  // not owned: the graph outlives its plans
  std::vector<OpLayout> layouts;     // by OpId; a backward op uses its forward op's layout
  std::vector<SubOp> sub_ops;        // by SubOpId, dead ones kept so ids stay valid
  std::vector<std::vector<SubOpId>> parts;  // live sub-ops of each op, in creation order
  std::vector<std::pair<SubOpId, SubOpId>> orders;  // first happens before second
  std::vector<char> recomputed;      // by SubOpId: plan/recompute.h's marks (bits); ids past the end: not recomputed
  std::vector<Residence> residence;  // by TensorId (plan/residence.h); tensors past the end: the default

  const SubOp& sub_op(SubOpId id) const { return sub_ops[id.index()]; }
  SubOp& sub_op(SubOpId id) { return sub_ops[id.index()]; }
  const ir::Op& op_of(SubOpId id) const { return graph->op(sub_op(id).op); }
  std::vector<SubOpId> live_sub_ops() const;  // in id order
};

// One sub-op per op over whole tensors, unassigned, with backward ops linked to their forward ops.
// The catalog gives each op's annotation and additive inputs; errors name the op.
Expected<Plan> make_plan(const ir::Graph& graph, const ir::OpCatalog& catalog);

// "%3[0:4, 0:8] (1 of 2)" for every input and output, one sub-op per line: a readable dump for tests.
std::string plan_to_text(const Plan& plan);

}  // namespace loom::plan
