#include <cstdio>
#include <cstdlib>

#include "loom/verify/kernel_families.h"

namespace loom::verify {

std::vector<std::int64_t> strides_of(const ir::Shape& shape) {
  std::vector<std::int64_t> strides(shape.rank(), 1);
  for (std::size_t i = shape.rank(); i-- > 1;) strides[i - 1] = strides[i] * shape.dims[i];
  return strides;
}

namespace {

// Every error a kernel returns names its op type: shared checks (attributes, arity) report only what
// is wrong, so the registry adds the type once here instead of every kernel doing it.
Kernel naming_errors(const std::string& type, Kernel kernel) {
  const auto named = [type](Error error) {
    return error.message.find(type) == std::string::npos ? with_context(std::move(error), type) : std::move(error);
  };
  Kernel wrapped{[named, forward = std::move(kernel.forward)](const KernelContext& ctx, std::span<const NdArray> in)
                     -> Expected<std::vector<NdArray>> {
                   auto out = forward(ctx, in);
                   if (!out) return std::unexpected(named(std::move(out).error()));
                   return out;
                 },
                 nullptr};
  if (kernel.backward)
    wrapped.backward = [named, backward = std::move(kernel.backward)](
                           const KernelContext& ctx, std::span<const NdArray> in, std::span<const NdArray> out,
                           std::span<const NdArray> grad_out) -> Expected<std::vector<NdArray>> {
      auto grads = backward(ctx, in, out, grad_out);
      if (!grads) return std::unexpected(named(std::move(grads).error()));
      return grads;
    };
  return wrapped;
}

}  // namespace

void KernelRegistry::add(std::string type, Kernel kernel) {
  if (!kernel.forward || kernels_.contains(type)) {
    std::fprintf(stderr, "loom: bad reference kernel registration for '%s'\n", type.c_str());
    std::abort();
  }
  Kernel named = naming_errors(type, std::move(kernel));
  kernels_.emplace(std::move(type), std::move(named));
}

const Kernel* KernelRegistry::find(std::string_view type) const {
  auto it = kernels_.find(type);
  return it == kernels_.end() ? nullptr : &it->second;
}

std::vector<std::string> KernelRegistry::types() const {
  std::vector<std::string> result;
  for (const auto& [type, kernel] : kernels_) result.push_back(type);
  return result;
}

const KernelRegistry& reference_kernels() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    register_linalg_kernels(r);
    register_elementwise_kernels(r);
    register_activation_kernels(r);
    register_norm_kernels(r);
    register_embedding_kernels(r);
    register_attention_kernels(r);
    register_conv_pool_kernels(r);
    register_shape_kernels(r);
    register_reduce_kernels(r);
    register_loss_kernels(r);
    register_moe_kernels(r);
    register_alphafold_kernels(r);
    register_swin_kernels(r);
    register_optimizer_kernels(r);
    register_autograd_kernels(r);
    return r;
  }();
  return registry;
}

}  // namespace loom::verify
