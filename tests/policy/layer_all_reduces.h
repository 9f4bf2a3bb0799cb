// Tensor-parallel all-reduces counted per transformer layer, for the Megatron analytic checks: forward
// (activations) and backward (gradients), the layer read from the moved tensor's name.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "loom/exec/exec_plan.h"

namespace loom::policy::testing {

struct LayerAllReduces {
  int forward = 0;   // all-reduces of activations
  int backward = 0;  // all-reduces of gradients
};

// By layer (layer_of(tensor name); "" outside the layers).
inline std::map<std::string, LayerAllReduces> all_reduces_per_layer(
    const exec::ExecPlan& exec, const std::function<std::string(const std::string&)>& layer_of) {
  const ir::Graph& graph = *exec.plan->graph;
  std::map<std::string, LayerAllReduces> counts;
  for (const exec::CollectiveInfo& info : exec.collectives) {
    if (!info.tensor.valid() || info.rule.find("all-reduce") == std::string::npos) continue;
    const ir::FullTensor& t = graph.tensor(info.tensor);
    LayerAllReduces& c = counts[layer_of(t.name)];
    (t.role == ir::TensorRole::gradient ? c.backward : c.forward) += 1;
  }
  return counts;
}

}  // namespace loom::policy::testing
