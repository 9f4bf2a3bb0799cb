#include "loom/policy/tensor_parallel.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "loom/plan/batch.h"

namespace loom::policy {
namespace {

using ir::Annotation;
using ir::DimAtom;
using ir::DimFlag;
using ir::TensorAnnotation;

// Where identifier x sits in one tensor: the dimension it names (alone or first of a merged dimension),
// -1 when absent, nullopt when it is a later atom of a merged dimension (which trans cannot split).
std::optional<int> position(const TensorAnnotation& tensor, std::string_view x) {
  if (tensor.opaque) return -1;
  for (std::size_t d = 0; d < tensor.dims.size(); ++d) {
    const auto& atoms = tensor.dims[d].atoms;
    for (std::size_t a = 0; a < atoms.size(); ++a)
      if (atoms[a].kind == DimAtom::Kind::identifier && atoms[a].name == x) {
        if (a > 0) return std::nullopt;
        return static_cast<int>(d);
      }
  }
  return -1;
}

// The identifier an op must be split along so that its inputs split as `split` says (input index,
// dimension) stay split without a gather; nullopt when the op cannot carry them (frozen or fixed-size
// dimensions, disagreeing identifiers, an identifier inside a merged dimension).
std::optional<std::string> carried(const Annotation& a, const std::vector<std::pair<std::size_t, int>>& split) {
  std::optional<std::string> x;
  for (const auto& [i, d] : split) {
    const TensorAnnotation& t = a.inputs[i];
    if (t.opaque || static_cast<std::size_t>(d) >= t.dims.size()) return std::nullopt;
    const DimAtom& atom = t.dims[static_cast<std::size_t>(d)].atoms.front();
    if (atom.kind != DimAtom::Kind::identifier || (x && *x != atom.name)) return std::nullopt;
    x = atom.name;
  }
  if (!x || a.flag_of(*x) == DimFlag::frozen) return std::nullopt;
  bool in_output = false;
  for (const TensorAnnotation& t : a.inputs)
    if (!position(t, *x)) return std::nullopt;
  for (const TensorAnnotation& t : a.outputs) {
    const std::optional<int> p = position(t, *x);
    if (!p) return std::nullopt;
    in_output |= *p >= 0;
  }
  if (a.flag_of(*x) != DimFlag::reduce && !in_output) return std::nullopt;
  return x;
}

// By OpId: the identifier running along the sequence for forward ops that see it (tensor_parallel.h),
// found as plan::batch_identifiers finds the batch.
std::vector<std::optional<std::string>> sequence_identifiers(const plan::Plan& plan) {
  const ir::Graph& graph = *plan.graph;
  std::vector<std::optional<std::string>> result(graph.ops.size());
  std::vector<int> sequence_dim(graph.tensors.size(), -1);
  for (ir::TensorId in : graph.inputs) {
    const ir::FullTensor& t = graph.tensor(in);
    if (t.shape.rank() == 2 && !ir::is_floating(t.dtype)) sequence_dim[in.index()] = 1;
  }
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward || plan.parts[op.id.index()].empty()) continue;
    const plan::SubOpId any = plan.parts[op.id.index()].front();
    const ir::Annotation& annotation = plan.layouts[op.id.index()].annotation;
    auto& x = result[op.id.index()];
    for (std::size_t i = 0; i < op.inputs.size() && !x; ++i) {
      const int d = sequence_dim[op.inputs[i].index()];
      if (d < 0) continue;
      auto id = plan::dim_identifier(plan, any, false, i, static_cast<std::size_t>(d));
      // A view merging the sequence after the batch ("(b s) h": HuggingFace's Conv1D) cannot split it: the
      // op and what reads its output keep the whole sequence (gathered before it), as the batch does.
      if (id && annotation.flag_of(*id) != DimFlag::frozen && !plan::inside_merged_dim(annotation, *id))
        x = std::move(id);
    }
    if (!x) continue;
    for (std::size_t j = 0; j < op.outputs.size(); ++j)
      for (std::size_t d = 0; d < graph.tensor(op.outputs[j]).shape.rank(); ++d)
        if (plan::dim_identifier(plan, any, true, j, d) == x) {
          sequence_dim[op.outputs[j].index()] = static_cast<int>(d);
          break;
        }
  }
  return result;
}

class Analysis {
 public:
  Analysis(const plan::Plan& plan, int tp)
      : plan_(plan), graph_(*plan.graph), tp_(tp), batch_(plan::batch_identifiers(plan)) {
    layout_.splits.resize(graph_.ops.size());
    layout_.sequence_split.assign(graph_.ops.size(), false);
    layout_.tensor_dims.assign(graph_.tensors.size(), -1);
    parameter_decided_.assign(graph_.tensors.size(), false);
    forward_consumers_.resize(graph_.tensors.size());
    for (const ir::Op& op : graph_.ops) {
      if (op.pass != ir::Pass::forward) continue;
      for (ir::TensorId in : op.inputs) {
        auto& list = forward_consumers_[in.index()];
        if (list.empty() || list.back() != op.id) list.push_back(op.id);
      }
    }
  }

  Expected<TensorParallelLayout> run(bool sequence_parallel) && {
    LOOM_RETURN_IF_ERROR(find_regions());
    if (sequence_parallel) LOOM_RETURN_IF_ERROR(split_sequence());
    return std::move(layout_);
  }

 private:
  Expected<void> find_regions() {
    for (const ir::Op& op : graph_.ops) {
      // Only ops that see the batch: data parallelism replicates the others, and a replica's value
      // cannot be divided afterwards (primitives.h, trans).
      if (op.pass != ir::Pass::forward || !batch_[op.id.index()]) continue;
      std::optional<std::string> x = choose(op);
      if (!x) continue;
      LOOM_RETURN_IF_ERROR(check_divisible(op, *x));
      commit(op, *x);
    }
    // Only across ranks: coshard's regions (tensor_parallel_regions, tp 1) chain the ops that see the batch.
    if (tp_ > 1) split_batchless_feeders();
    return {};
  }

  // Ops without a batch whose every forward reader is tensor-parallel and reads them split along one
  // plain dimension (T5's and Swin's relative-position biases, read by attention split by heads) are
  // split the same way, from the readers back: each rank computes its heads' bias, and the bias
  // gradient, summed over the layers and micro-batches, stays on its rank until the small table's
  // gradient is reduced over dp. Replicated, every rank would gather every head's [h, s, t] gradient.
  void split_batchless_feeders() {
    for (auto it = graph_.ops.rbegin(); it != graph_.ops.rend(); ++it) {
      const ir::Op& op = *it;
      if (op.pass != ir::Pass::forward || batch_[op.id.index()] || layout_.splits[op.id.index()] ||
          op.outputs.size() != 1)
        continue;
      const std::optional<int> dim = split_dim_read(op.outputs.front());
      if (!dim) continue;
      const plan::SubOpId any = plan_.parts[op.id.index()].front();
      const std::optional<std::string> x = plan::dim_identifier(plan_, any, true, 0, static_cast<std::size_t>(*dim));
      if (!x || annotation(op).flag_of(*x) != DimFlag::none || !check_divisible(op, *x)) continue;
      if (output_dims(op, *x).front() != *dim) continue;
      commit(op, *x);
    }
  }

  // The dimension of `t` that all its forward readers read split (each split, and t at the same
  // dimension of every input it feeds), nullopt otherwise.
  std::optional<int> split_dim_read(ir::TensorId t) const {
    const auto& readers = forward_consumers_[t.index()];
    if (readers.empty()) return std::nullopt;
    std::optional<int> dim;
    for (ir::OpId r : readers) {
      const auto& split = layout_.splits[r.index()];
      if (!split) return std::nullopt;
      const ir::Op& reader = graph_.op(r);
      for (std::size_t i = 0; i < reader.inputs.size(); ++i) {
        if (reader.inputs[i] != t) continue;
        const std::optional<int> d = position(annotation(reader).inputs[i], split->identifier);
        if (!d || *d < 0 || (dim && *dim != *d)) return std::nullopt;
        dim = *d;
      }
    }
    return dim;
  }

  // Sequence parallelism, after the tensor-parallel regions are settled: the ops left replicated that
  // see the batch are split along their sequence identifier, when they have one other than the batch's.
  Expected<void> split_sequence() {
    const std::vector<std::optional<std::string>> sequence = sequence_identifiers(plan_);
    int split = 0;
    for (const ir::Op& op : graph_.ops) {
      const auto& x = sequence[op.id.index()];
      if (op.pass != ir::Pass::forward || !batch_[op.id.index()] || layout_.splits[op.id.index()] || !x ||
          *x == *batch_[op.id.index()])
        continue;
      LOOM_RETURN_IF_ERROR(with_context(check_divisible(op, *x), "sequence parallelism"));
      layout_.splits[op.id.index()] = plan::SplitAlgo{.identifier = *x};
      layout_.sequence_split[op.id.index()] = true;
      const std::vector<int> dims = output_dims(op, *x);
      for (std::size_t j = 0; j < op.outputs.size(); ++j) layout_.tensor_dims[op.outputs[j].index()] = dims[j];
      ++split;
    }
    // A sequence-split tensor that only tensor-parallel ops read (the norms' outputs before QKV or fc1)
    // gets its gradient back as partial sums: its gradient accumulation is left to add those (then one
    // reduce-scatter follows), rather than split along the sequence (a reduce-scatter per partial sum).
    for (const ir::Op& op : graph_.ops) {
      if (!layout_.sequence_split[op.id.index()]) continue;
      for (ir::TensorId t : op.outputs) {
        const auto& readers = forward_consumers_[t.index()];
        const bool only_tensor_parallel = !readers.empty() && std::ranges::all_of(readers, [&](ir::OpId r) {
          return layout_.splits[r.index()] && !layout_.sequence_split[r.index()];
        });
        if (only_tensor_parallel) layout_.tensor_dims[t.index()] = -1;
      }
    }
    if (split == 0)
      return fail(fmt::format("sequence parallelism: no op of '{}' carries a sequence", graph_.name),
                  "sequence parallelism needs token inputs [batch, seq] (language models); leave it off for this model");
    return {};
  }

  const Annotation& annotation(const ir::Op& op) const { return plan_.layouts[op.id.index()].annotation; }

  std::optional<std::string> choose(const ir::Op& op) const {
    const Annotation& a = annotation(op);
    // Inside a region opened by an earlier seed: carry its split.
    std::vector<std::pair<std::size_t, int>> split;
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
      if (const int d = layout_.tensor_dims[op.inputs[i].index()]; d >= 0 && !is_parameter(op.inputs[i]))
        split.emplace_back(i, d);
    if (!split.empty()) return carried(a, split);
    const plan::SubOpId any = plan_.parts[op.id.index()].front();
    const bool transposed_linear = is_transposed_linear(op);
    if (op.type == "linear" || op.type == "moe_dispatch" || transposed_linear) {
      // Column parallel: the output features (dim 0 of a linear's weight [out, in], dim 1 of a
      // matmul's parameter [in, out]: HuggingFace's Conv1D); expert parallel: the experts (dim 0 of the
      // dispatched tokens).
      const bool linear = op.type != "moe_dispatch";
      std::optional<std::string> x =
          transposed_linear ? plan::dim_identifier(plan_, any, false, 1, graph_.tensor(op.inputs[1]).shape.rank() - 1)
                            : plan::dim_identifier(plan_, any, !linear, linear ? 1 : 0, 0);
      bool closes_in_weights = false;
      if (!x || !region_closes(op, *x, closes_in_weights)) return std::nullopt;
      // A vocabulary head (its region ends in the loss's parts, not in a row-parallel linear) whose
      // vocabulary tp does not divide stays replicated, as its embedding does; Megatron would pad the
      // vocabulary (GPT's 50257 to 50304). Heads, hidden and FFN sizes tp must divide (an error).
      if (linear && !closes_in_weights && !check_divisible(op, *x)) return std::nullopt;
      return x;
    }
    if (op.type == "embedding") {
      // Vocabulary parallel when tp divides the table's rows; small tables (BERT's two token types
      // under tp 4) stay replicated.
      std::optional<std::string> v = plan::dim_identifier(plan_, any, false, 1, 0);
      if (v && a.flag_of(*v) == DimFlag::reduce && graph_.tensor(op.inputs[1]).shape[0] % tp_ == 0) return v;
      return std::nullopt;
    }
    // Fused head-parallel ops: a reduction identifier that only parameters carry.
    for (const std::string& x : a.identifiers()) {
      if (a.flag_of(x) != DimFlag::reduce) continue;
      bool seen = false, only_parameters = true;
      for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        const std::optional<int> p = position(a.inputs[i], x);
        if (!p) {
          only_parameters = false;
          break;
        }
        if (*p < 0) continue;
        seen = true;
        only_parameters &= is_parameter(op.inputs[i]);
      }
      if (seen && only_parameters) return x;
    }
    return std::nullopt;
  }

  bool is_parameter(ir::TensorId t) const { return graph_.tensor(t).role == ir::TensorRole::parameter; }

  // x [.., k] @ W [k, n] with W a parameter: a linear whose weight is stored transposed (HuggingFace's
  // Conv1D, traced as matmul + add; an einsum "mk,kpn->mpn" when the tracer laid a fused projection
  // out per part, python/loom/fused_projection.py). Its last weight dim 'n' splits column parallel;
  // 'k+' row parallel, which the region rules find as for any reduction.
  bool is_transposed_linear(const ir::Op& op) const {
    if (op.inputs.size() != 2 || is_parameter(op.inputs[0]) || !is_parameter(op.inputs[1])) return false;
    if (op.type == "matmul") return graph_.tensor(op.inputs[1]).shape.rank() == 2;
    if (op.type != "einsum") return false;
    const TensorAnnotation& weight = annotation(op).inputs[1];
    if (weight.opaque || weight.dims.empty() || weight.dims.back().atoms.size() != 1) return false;
    const DimAtom& n = weight.dims.back().atoms.front();
    return n.kind == DimAtom::Kind::identifier && annotation(op).flag_of(n.name) != DimFlag::reduce;
  }

  // The outputs' split dimensions when the op is split along x (none for a reduction: partial sums).
  std::vector<int> output_dims(const ir::Op& op, const std::string& x) const {
    const Annotation& a = annotation(op);
    std::vector<int> dims(op.outputs.size(), -1);
    if (a.flag_of(x) == DimFlag::reduce) return dims;
    for (std::size_t j = 0; j < op.outputs.size(); ++j) dims[j] = position(a.outputs[j], x).value_or(-1);
    return dims;
  }

  // Splitting `seed` along x opens a region that closes without a gather: every forward op reached
  // through split tensors carries the split, and every path ends in a reduction. `closes_in_weights`:
  // some path ends in an op that reads a parameter (a row-parallel linear, not only a loss).
  bool region_closes(const ir::Op& seed, const std::string& x, bool& closes_in_weights) const {
    std::unordered_map<std::uint32_t, int> fresh;  // tensors the region splits, by index
    std::size_t pending = 0;                       // consumers of fresh tensors not yet visited
    const auto add = [&](const ir::Op& op, const std::vector<int>& dims) {
      for (std::size_t j = 0; j < op.outputs.size(); ++j)
        if (dims[j] >= 0) {
          fresh[op.outputs[j].index()] = dims[j];
          pending += forward_consumers_[op.outputs[j].index()].size();
        }
    };
    add(seed, output_dims(seed, x));
    if (fresh.empty()) return false;
    for (std::size_t i = seed.id.index() + 1; i < graph_.ops.size() && pending > 0; ++i) {
      const ir::Op& op = graph_.ops[i];
      if (op.pass != ir::Pass::forward) continue;
      std::vector<std::pair<std::size_t, int>> split;
      std::vector<std::uint32_t> touched;
      for (std::size_t k = 0; k < op.inputs.size(); ++k) {
        const std::uint32_t t = op.inputs[k].index();
        if (auto it = fresh.find(t); it != fresh.end()) {
          split.emplace_back(k, it->second);
          if (std::find(touched.begin(), touched.end(), t) == touched.end()) touched.push_back(t);
        } else if (layout_.tensor_dims[t] >= 0 && !is_parameter(op.inputs[k])) {
          split.emplace_back(k, layout_.tensor_dims[t]);
        }
      }
      if (touched.empty()) continue;
      pending -= touched.size();
      const std::optional<std::string> y = batch_[op.id.index()] ? carried(annotation(op), split) : std::nullopt;
      if (!y) return false;
      if (annotation(op).flag_of(*y) == DimFlag::reduce)
        closes_in_weights |= std::ranges::any_of(op.inputs, [&](ir::TensorId t) { return is_parameter(t); });
      add(op, output_dims(op, *y));
    }
    return true;
  }

  Expected<void> check_divisible(const ir::Op& op, const std::string& x) const {
    const Annotation& a = annotation(op);
    const auto check = [&](const std::vector<TensorAnnotation>& side, const std::vector<ir::TensorId>& tensors,
                           const char* kind) -> Expected<void> {
      for (std::size_t i = 0; i < side.size() && i < tensors.size(); ++i) {
        const int d = position(side[i], x).value_or(-1);
        if (d < 0) continue;
        const ir::FullTensor& t = graph_.tensor(tensors[i]);
        const std::int64_t size = t.shape[static_cast<std::size_t>(d)];
        if (size % tp_ != 0)
          return fail(fmt::format("tensor parallelism {}: op '{}' ({}) is split along '{}', which has {} elements in {} "
                                  "{} ('{}' {}); {} does not divide {}",
                                  tp_, op.name, ir::to_string(a), x, size, kind, i, t.name, t.shape.to_string(), tp_,
                                  size),
                      "choose a tp that divides the model's heads, hidden and FFN sizes");
      }
      return {};
    };
    LOOM_RETURN_IF_ERROR(check(a.inputs, op.inputs, "input"));
    return check(a.outputs, op.outputs, "output");
  }

  void commit(const ir::Op& op, const std::string& x) {
    layout_.splits[op.id.index()] = plan::SplitAlgo{.identifier = x};
    const std::vector<int> dims = output_dims(op, x);
    for (std::size_t j = 0; j < op.outputs.size(); ++j) layout_.tensor_dims[op.outputs[j].index()] = dims[j];
    const Annotation& a = annotation(op);
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const ir::TensorId t = op.inputs[i];
      if (!is_parameter(t) || parameter_decided_[t.index()]) continue;
      parameter_decided_[t.index()] = true;
      layout_.tensor_dims[t.index()] = position(a.inputs[i], x).value_or(-1);
    }
  }

  const plan::Plan& plan_;
  const ir::Graph& graph_;
  int tp_;
  std::vector<std::optional<std::string>> batch_;
  std::vector<std::vector<ir::OpId>> forward_consumers_;  // by TensorId, distinct, program order
  std::vector<bool> parameter_decided_;
  TensorParallelLayout layout_;
};

}  // namespace

Expected<TensorParallelLayout> tensor_parallel_layout(const plan::Plan& plan, int tp, bool sequence_parallel) {
  if (tp < 1) return fail(fmt::format("tensor parallelism {}: the degree must be at least 1", tp));
  if (sequence_parallel && tp == 1)
    return fail("sequence parallelism needs tensor parallelism: tp is 1",
                "sequence parallelism splits the ops tensor parallelism replicates over the tp ranks; set tp > 1");
  if (tp == 1)
    return TensorParallelLayout{.splits = std::vector<std::optional<plan::SplitAlgo>>(plan.graph->ops.size()),
                                .tensor_dims = std::vector<int>(plan.graph->tensors.size(), -1),
                                .sequence_split = std::vector<bool>(plan.graph->ops.size(), false)};
  return Analysis(plan, tp).run(sequence_parallel);
}

Expected<TensorParallelLayout> tensor_parallel_regions(const plan::Plan& plan) { return Analysis(plan, 1).run(false); }

}  // namespace loom::policy
