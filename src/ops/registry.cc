#include "loom/ops/registry.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "loom/ops/families.h"

namespace loom::ops {

Expected<void> OpRegistry::add(ir::OpDef def) {
  if (def.type.empty()) return fail("an op definition needs a type name");
  if (!def.signature) return fail(fmt::format("op type '{}' has no signature", def.type));
  if (defs_.contains(def.type)) return fail(fmt::format("op type '{}' is registered twice", def.type));
  std::string type = def.type;
  defs_.emplace(std::move(type), std::move(def));
  return {};
}

void OpRegistry::add_builtin(ir::OpDef def) {
  if (auto added = add(std::move(def)); !added) {
    std::fprintf(stderr, "loom: bad built-in op definition: %s\n", added.error().message.c_str());
    std::abort();
  }
}

const ir::OpDef* OpRegistry::find(std::string_view type) const {
  auto it = defs_.find(type);
  return it == defs_.end() ? nullptr : &it->second;
}

std::vector<const ir::OpDef*> OpRegistry::all() const {
  std::vector<const ir::OpDef*> result;
  for (const auto& [type, def] : defs_) result.push_back(&def);
  std::stable_sort(result.begin(), result.end(),
                   [](const ir::OpDef* a, const ir::OpDef* b) { return a->family < b->family; });
  return result;
}

const OpRegistry& builtin_ops() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    register_linalg_ops(r);
    register_elementwise_ops(r);
    register_activation_ops(r);
    register_norm_ops(r);
    register_embedding_ops(r);
    register_attention_ops(r);
    register_conv_pool_ops(r);
    register_shape_ops(r);
    register_reduce_ops(r);
    register_loss_ops(r);
    register_moe_ops(r);
    register_alphafold_ops(r);
    register_swin_ops(r);
    register_optimizer_ops(r);
    register_autograd_ops(r);
    register_comparison_ops(r);
    register_scan_ops(r);
    register_gather_ops(r);
    register_routing_ops(r);
    register_padding_ops(r);
    register_resample_ops(r);
    return r;
  }();
  return registry;
}

}  // namespace loom::ops
