#include "loom/policy/attention_core.h"

#include <optional>

#include "loom/policy/stages.h"

namespace loom::policy {
namespace {

// The ops a core may hold between its contractions are short chains; a longer walk is not an attention.
constexpr int kLongestPath = 16;

class CoreFinder {
 public:
  CoreFinder(const ir::Graph& graph, const ir::OpCatalog& catalog)
      : graph_(graph), catalog_(catalog), producer_(ir::producers(graph)), consumers_(ir::consumers(graph)) {}

  // Marks the core around `softmax` in `in_core` when the softmax has the core's shape.
  void mark(const ir::Op& softmax, std::vector<char>& in_core) const {
    std::vector<ir::OpId> core{softmax.id};
    const std::string_view layer = layer_of(softmax.name);
    // Back to the scores: the chain input is the one as large as the op's output (a bias or mask broadcasts).
    ir::TensorId t = softmax.inputs.front();
    for (int step = 0;; ++step) {
      const std::optional<ir::OpId> p = forward_producer(t, layer);
      if (!p || step == kLongestPath) return;
      const ir::Op& op = graph_.op(*p);
      core.push_back(op.id);
      if (contracts_activations(op)) break;
      if (!passes_through(op)) return;
      const std::optional<ir::TensorId> next = chain_input(op);
      if (!next) return;
      t = *next;
    }
    // On to the context: each op on the path read by one forward op.
    t = softmax.outputs.front();
    for (int step = 0;; ++step) {
      const std::optional<ir::OpId> c = only_forward_reader(t, layer);
      if (!c || step == kLongestPath) return;
      const ir::Op& op = graph_.op(*c);
      core.push_back(op.id);
      if (contracts_activations(op)) {
        t = op.outputs.front();
        break;
      }
      if (!passes_through(op) || op.outputs.size() != 1) return;
      t = op.outputs.front();
    }
    // The context's heads regrouped and merged, up to its next compute op (the output projection).
    for (int step = 0; step < kLongestPath; ++step) {
      const std::optional<ir::OpId> c = only_forward_reader(t, layer);
      if (!c || op_class(graph_.op(*c)) != ir::OpClass::data_movement || graph_.op(*c).outputs.size() != 1) break;
      core.push_back(*c);
      t = graph_.op(*c).outputs.front();
    }
    for (ir::OpId id : core) in_core[id.index()] = 1;
  }

 private:
  std::optional<ir::OpClass> op_class(const ir::Op& op) const {
    const ir::OpDef* def = catalog_.find(op.type);
    if (def == nullptr) return std::nullopt;
    return def->op_class;
  }

  bool is_activation(ir::TensorId t) const {
    const ir::OpId p = producer_[t.index()];
    return p.valid() && graph_.op(p).pass == ir::Pass::forward;
  }

  // q·kᵀ or p·v: a contraction whose two operands are both computed (a linear reads a weight).
  bool contracts_activations(const ir::Op& op) const {
    if (op_class(op) != ir::OpClass::contraction || op.inputs.size() != 2) return false;
    return is_activation(op.inputs[0]) && is_activation(op.inputs[1]);
  }

  bool passes_through(const ir::Op& op) const {
    const std::optional<ir::OpClass> c = op_class(op);
    return c == ir::OpClass::elementwise || c == ir::OpClass::data_movement;
  }

  // The forward op of the same layer writing `t`.
  std::optional<ir::OpId> forward_producer(ir::TensorId t, std::string_view layer) const {
    const ir::OpId p = producer_[t.index()];
    if (!p.valid() || graph_.op(p).pass != ir::Pass::forward || layer_of(graph_.op(p).name) != layer) return std::nullopt;
    return p;
  }

  // The one forward op of the same layer reading `t`, when only one forward op reads it.
  std::optional<ir::OpId> only_forward_reader(ir::TensorId t, std::string_view layer) const {
    std::optional<ir::OpId> reader;
    for (ir::OpId c : consumers_[t.index()]) {
      if (graph_.op(c).pass != ir::Pass::forward) continue;
      if (reader) return std::nullopt;
      reader = c;
    }
    if (!reader || layer_of(graph_.op(*reader).name) != layer) return std::nullopt;
    return reader;
  }

  // The computed input with as many elements as the op's output (the scores, not a broadcast bias).
  std::optional<ir::TensorId> chain_input(const ir::Op& op) const {
    if (op.outputs.size() != 1) return std::nullopt;
    const std::int64_t size = graph_.tensor(op.outputs.front()).shape.numel();
    for (ir::TensorId in : op.inputs)
      if (is_activation(in) && graph_.tensor(in).shape.numel() == size) return in;
    return std::nullopt;
  }

  const ir::Graph& graph_;
  const ir::OpCatalog& catalog_;
  std::vector<ir::OpId> producer_;
  std::vector<std::vector<ir::OpId>> consumers_;
};

}  // namespace

std::vector<char> attention_core_ops(const ir::Graph& graph, const ir::OpCatalog& catalog) {
  std::vector<char> in_core(graph.ops.size(), 0);
  const CoreFinder finder(graph, catalog);
  for (const ir::Op& op : graph.ops)
    if (op.pass == ir::Pass::forward && op.type == "softmax" && op.inputs.size() == 1 && op.outputs.size() == 1)
      finder.mark(op, in_core);
  return in_core;
}

}  // namespace loom::policy
