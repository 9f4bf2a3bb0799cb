// Optimizer steps exactly as torch.optim computes them (foreach=False, maximize=False, no nesterov,
// no amsgrad), elementwise, so a ZeRO shard of the parameter updates the same as the whole.
// Inputs: param, grad, [master], states; outputs: param', [master'], states'. With master weights
// the update runs on the fp32 master copy and param' equals master' (the reference keeps float64, so
// the cast back to the 16-bit parameter is exact here). Defaults are torch's: lr 1e-3, betas
// (0.9, 0.999), eps 1e-8, weight_decay 0 (adamw 1e-2). The step number is attr "step", default 1 (the
// first step: Adam's bias corrections use it; SGD's momentum buffer starts as the gradient).
#include <cmath>

#include "kernel_support.h"
#include "loom/verify/kernel_families.h"

namespace loom::verify {
namespace {

using namespace detail;

enum class Rule { sgd, adam, adamw };

struct Hyper {
  double lr, beta1, beta2, eps, weight_decay, momentum;
  std::int64_t step;
  bool master;
};

Expected<Hyper> hyper(const ir::Attrs& a, Rule rule, std::string_view op) {
  Hyper h{};
  LOOM_ASSIGN_OR_RETURN(h.lr, attr(ir::get_real_or(a, "lr", 1e-3), op));
  LOOM_ASSIGN_OR_RETURN(h.beta1, attr(ir::get_real_or(a, "beta1", 0.9), op));
  LOOM_ASSIGN_OR_RETURN(h.beta2, attr(ir::get_real_or(a, "beta2", 0.999), op));
  LOOM_ASSIGN_OR_RETURN(h.eps, attr(ir::get_real_or(a, "eps", 1e-8), op));
  LOOM_ASSIGN_OR_RETURN(h.weight_decay, attr(ir::get_real_or(a, "weight_decay", rule == Rule::adamw ? 1e-2 : 0.0), op));
  LOOM_ASSIGN_OR_RETURN(h.momentum, attr(ir::get_real_or(a, "momentum", 0.0), op));
  LOOM_ASSIGN_OR_RETURN(h.step, attr(ir::get_int_or(a, "step", 1), op));
  LOOM_ASSIGN_OR_RETURN(h.master, attr(ir::get_bool_or(a, "master_weights", false), op));
  if (h.step < 1) return failf("{}: step {} must be >= 1", op, h.step);
  if (h.momentum < 0) return failf("{}: momentum {} must be >= 0", op, h.momentum);
  return h;
}

Kernel optimizer_kernel(std::string op, Rule rule) {
  Kernel k;
  k.forward = [op, rule](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Hyper h, hyper(ctx.attrs, rule, op));
    const std::size_t moments = rule == Rule::sgd ? (h.momentum > 0 ? 1 : 0) : 2;
    const std::size_t expected = 2 + (h.master ? 1 : 0) + moments;
    LOOM_RETURN_IF_ERROR(expect_arity(in, expected, expected, op));
    for (std::size_t t = 1; t < in.size(); ++t) LOOM_RETURN_IF_ERROR(expect_same_shape(in[0], in[t], op, "parameter and states"));
    const std::size_t first_moment = h.master ? 3 : 2;
    NdArray weights = h.master ? in[2] : in[0];  // what the update runs on
    const NdArray& grad = in[1];
    Arrays moment;
    for (std::size_t m = 0; m < moments; ++m) moment.push_back(in[first_moment + m]);
    const double t = static_cast<double>(h.step);
    for (std::size_t i = 0; i < weights.data.size(); ++i) {
      double& p = weights.data[i];
      double g = grad.data[i];
      if (rule == Rule::sgd) {
        g += h.weight_decay * p;
        if (moments == 1) {
          double& buf = moment[0].data[i];
          buf = h.step == 1 ? g : h.momentum * buf + g;
          g = buf;
        }
        p -= h.lr * g;
        continue;
      }
      if (rule == Rule::adamw) p *= 1 - h.lr * h.weight_decay;
      else g += h.weight_decay * p;
      double& m = moment[0].data[i];
      double& v = moment[1].data[i];
      m = h.beta1 * m + (1 - h.beta1) * g;
      v = h.beta2 * v + (1 - h.beta2) * g * g;
      const double bias1 = 1 - std::pow(h.beta1, t), bias2 = 1 - std::pow(h.beta2, t);
      p -= h.lr / bias1 * m / (std::sqrt(v) / std::sqrt(bias2) + h.eps);
    }
    Arrays outputs{weights};
    if (h.master) outputs.push_back(weights);
    for (NdArray& m : moment) outputs.push_back(std::move(m));
    return outputs;
  };
  return k;
}

}  // namespace

void register_optimizer_kernels(KernelRegistry& r) {
  r.add("sgd", optimizer_kernel("sgd", Rule::sgd));
  r.add("adam", optimizer_kernel("adam", Rule::adam));
  r.add("adamw", optimizer_kernel("adamw", Rule::adamw));
}

}  // namespace loom::verify
