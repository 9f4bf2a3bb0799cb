// Reference kernels of the mixture-of-experts family, GShard's formulation over token groups
// x [g t h]: a top-k gate with a per-group expert capacity, and dispatch / combine as einsums with the
// gate's [g t e c] tensors.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "loom/verify/kernel_families.h"
#include "loom/verify/ndarray_ops.h"

namespace loom::verify {
namespace {

using Tensors = Expected<std::vector<NdArray>>;

std::size_t at(std::initializer_list<std::int64_t> index, const ir::Shape& shape) {
  std::int64_t flat = 0;
  std::size_t dim = 0;
  for (std::int64_t i : index) flat = flat * shape[dim++] + i;
  return static_cast<std::size_t>(flat);
}

Expected<void> expect_ranks(std::string_view op, std::span<const NdArray> in, std::size_t rank0, std::size_t rank1) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 2, op));
  if (in[0].shape.rank() != rank0 || in[1].shape.rank() != rank1)
    return failf("{}: inputs must have ranks {} and {}, got {} and {}", op, rank0, rank1, in[0].shape.to_string(),
                 in[1].shape.to_string());
  return {};
}

// One token's routing: its softmax over experts, its top-k experts (best first) and, per chosen
// expert, the capacity slot it got (-1 when the expert was full).
struct TokenRoute {
  std::vector<double> prob;
  std::vector<std::int64_t> experts;
  std::vector<std::int64_t> slots;
};

struct Routing {
  std::int64_t groups = 0, tokens = 0, hidden = 0, experts = 0, top_k = 0, capacity = 0;
  std::vector<TokenRoute> routes;  // [g t], row-major

  ir::Shape gate_shape() const { return ir::Shape{groups, tokens, experts, capacity}; }
  // The combine weight of choice r: the softmax probability, renormalised over the top-k choices
  // when k > 1 (GShard's top-2 gate divides by g1 + g2); plain for top-1 (Switch).
  double weight(const TokenRoute& route, std::size_t r) const {
    const double p = route.prob[static_cast<std::size_t>(route.experts[r])];
    return top_k == 1 ? p : p / selected_mass(route);
  }
  double selected_mass(const TokenRoute& route) const {
    double total = 0;
    for (std::int64_t e : route.experts) total += route.prob[static_cast<std::size_t>(e)];
    return total;
  }
};

// Softmax over experts, top-k (ties: the lower expert index), then capacity slots assigned as GShard
// does: all first choices in token order, then all second choices, and so on, so a token's first
// choice is never dropped for another token's second. Choices beyond the capacity are dropped
// (their token's combine weights are not renormalised).
Expected<Routing> route(const KernelContext& ctx, std::span<const NdArray> in) {
  constexpr std::string_view op = "moe_gate";
  LOOM_RETURN_IF_ERROR(expect_ranks(op, in, 3, 2));
  const NdArray &x = in[0], &w = in[1];
  Routing r{.groups = x.shape[0], .tokens = x.shape[1], .hidden = x.shape[2], .experts = w.shape[0]};
  if (w.shape[1] != r.hidden)
    return failf("{}: gate weight {} does not match hidden size {}", op, w.shape.to_string(), r.hidden);
  LOOM_ASSIGN_OR_RETURN(r.top_k, ir::get_int_or(ctx.attrs, "top_k", 2));
  LOOM_ASSIGN_OR_RETURN(r.capacity, ir::get_int(ctx.attrs, "capacity"));
  if (r.top_k < 1 || r.top_k > r.experts) return failf("{}: top_k {} is outside [1, {}]", op, r.top_k, r.experts);
  if (r.capacity <= 0) return failf("{}: capacity {} must be positive", op, r.capacity);
  for (std::int64_t g = 0; g < r.groups; ++g)
    for (std::int64_t t = 0; t < r.tokens; ++t) {
      TokenRoute& token = r.routes.emplace_back();
      token.prob.assign(static_cast<std::size_t>(r.experts), 0.0);
      for (std::int64_t e = 0; e < r.experts; ++e)
        for (std::int64_t h = 0; h < r.hidden; ++h)
          token.prob[static_cast<std::size_t>(e)] += x.data[at({g, t, h}, x.shape)] * w.data[at({e, h}, w.shape)];
      const double top = *std::max_element(token.prob.begin(), token.prob.end());
      double total = 0;
      for (double& p : token.prob) total += (p = std::exp(p - top));
      for (double& p : token.prob) p /= total;
      std::vector<std::int64_t> order(static_cast<std::size_t>(r.experts));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
        return token.prob[static_cast<std::size_t>(a)] > token.prob[static_cast<std::size_t>(b)];
      });
      token.experts.assign(order.begin(), order.begin() + r.top_k);
      token.slots.assign(static_cast<std::size_t>(r.top_k), -1);
    }
  for (std::int64_t g = 0; g < r.groups; ++g) {
    std::vector<std::int64_t> filled(static_cast<std::size_t>(r.experts), 0);
    for (std::size_t choice = 0; choice < static_cast<std::size_t>(r.top_k); ++choice)
      for (std::int64_t t = 0; t < r.tokens; ++t) {
        TokenRoute& token = r.routes[static_cast<std::size_t>(g * r.tokens + t)];
        std::int64_t& count = filled[static_cast<std::size_t>(token.experts[choice])];
        if (count < r.capacity) token.slots[choice] = count++;
      }
  }
  return r;
}

// Outputs: combine weights [g t e c] and the dispatch mask [g t e c] (0 / 1).
Tensors gate_forward(const KernelContext& ctx, std::span<const NdArray> in) {
  LOOM_ASSIGN_OR_RETURN(Routing r, route(ctx, in));
  NdArray combine(r.gate_shape()), dispatch(r.gate_shape());
  for (std::int64_t g = 0; g < r.groups; ++g)
    for (std::int64_t t = 0; t < r.tokens; ++t) {
      const TokenRoute& token = r.routes[static_cast<std::size_t>(g * r.tokens + t)];
      for (std::size_t choice = 0; choice < token.experts.size(); ++choice) {
        if (token.slots[choice] < 0) continue;
        const std::size_t i = at({g, t, token.experts[choice], token.slots[choice]}, combine.shape);
        combine.data[i] = r.weight(token, choice);
        dispatch.data[i] = 1.0;
      }
    }
  return std::vector<NdArray>{std::move(combine), std::move(dispatch)};
}

// Only the combine weights carry a gradient (the mask is boolean); routing decisions are piecewise
// constant, so the gradient flows through the weights' softmax (and top-k renormalisation) only.
Tensors gate_backward(const KernelContext& ctx, std::span<const NdArray> in, std::span<const NdArray>,
                      std::span<const NdArray> grad_out) {
  LOOM_ASSIGN_OR_RETURN(Routing r, route(ctx, in));
  if (grad_out.empty() || grad_out[0].shape != r.gate_shape())
    return failf("moe_gate: backward needs the combine weights' gradient {}", r.gate_shape().to_string());
  const NdArray &x = in[0], &w = in[1], &dcombine = grad_out[0];
  std::vector<NdArray> grads = {NdArray(x.shape), NdArray(w.shape)};
  for (std::int64_t g = 0; g < r.groups; ++g)
    for (std::int64_t t = 0; t < r.tokens; ++t) {
      const TokenRoute& token = r.routes[static_cast<std::size_t>(g * r.tokens + t)];
      std::vector<double> dweight(token.experts.size(), 0.0);  // per choice; 0 when dropped
      for (std::size_t choice = 0; choice < token.experts.size(); ++choice)
        if (token.slots[choice] >= 0)
          dweight[choice] = dcombine.data[at({g, t, token.experts[choice], token.slots[choice]}, dcombine.shape)];
      std::vector<double> dprob(token.prob.size(), 0.0);
      if (r.top_k == 1) {
        dprob[static_cast<std::size_t>(token.experts[0])] = dweight[0];
      } else {  // w_i = p_i / S over the chosen: dp_j = dw_j / S - sum_i dw_i p_i / S^2
        const double mass = r.selected_mass(token);
        double cross = 0;
        for (std::size_t choice = 0; choice < token.experts.size(); ++choice)
          cross += dweight[choice] * token.prob[static_cast<std::size_t>(token.experts[choice])];
        for (std::size_t choice = 0; choice < token.experts.size(); ++choice)
          dprob[static_cast<std::size_t>(token.experts[choice])] = dweight[choice] / mass - cross / (mass * mass);
      }
      double dot = 0;
      for (std::size_t e = 0; e < dprob.size(); ++e) dot += dprob[e] * token.prob[e];
      for (std::int64_t e = 0; e < r.experts; ++e) {
        const double dlogit = token.prob[static_cast<std::size_t>(e)] * (dprob[static_cast<std::size_t>(e)] - dot);
        for (std::int64_t h = 0; h < r.hidden; ++h) {
          grads[0].data[at({g, t, h}, x.shape)] += dlogit * w.data[at({e, h}, w.shape)];
          grads[1].data[at({e, h}, w.shape)] += dlogit * x.data[at({g, t, h}, x.shape)];
        }
      }
    }
  return grads;
}

// Shapes of dispatch (x [g t h], mask [g t e c]) and combine (expert_out [e g c h], weights [g t e c]).
struct EinsumSizes {
  std::int64_t g, t, e, c, h;
};

Expected<EinsumSizes> dispatch_sizes(std::span<const NdArray> in) {
  LOOM_RETURN_IF_ERROR(expect_ranks("moe_dispatch", in, 3, 4));
  const ir::Shape &x = in[0].shape, &mask = in[1].shape;
  if (mask[0] != x[0] || mask[1] != x[1])
    return failf("moe_dispatch: x {} and dispatch {} disagree on [g t]", x.to_string(), mask.to_string());
  return EinsumSizes{x[0], x[1], mask[2], mask[3], x[2]};
}

Expected<EinsumSizes> combine_sizes(std::span<const NdArray> in) {
  LOOM_RETURN_IF_ERROR(expect_ranks("moe_combine", in, 4, 4));
  const ir::Shape &y = in[0].shape, &weights = in[1].shape;
  if (y[0] != weights[2] || y[1] != weights[0] || y[2] != weights[3])
    return failf("moe_combine: expert_out {} [e g c h] and combine {} [g t e c] disagree", y.to_string(),
                 weights.to_string());
  return EinsumSizes{y[1], weights[1], y[0], y[2], y[3]};
}

// Visits every (g, t, e, c, h) with the flat positions of x [g t h], the gate tensor [g t e c] and
// the expert-side tensor [e g c h].
template <class Visit>
void for_each_term(const EinsumSizes& n, Visit&& visit) {
  const ir::Shape tokens{n.g, n.t, n.h}, gate{n.g, n.t, n.e, n.c}, experts{n.e, n.g, n.c, n.h};
  for (std::int64_t g = 0; g < n.g; ++g)
    for (std::int64_t t = 0; t < n.t; ++t)
      for (std::int64_t e = 0; e < n.e; ++e)
        for (std::int64_t c = 0; c < n.c; ++c)
          for (std::int64_t h = 0; h < n.h; ++h)
            visit(at({g, t, h}, tokens), at({g, t, e, c}, gate), at({e, g, c, h}, experts));
}

// einsum "gtec,gth->egch"
Tensors dispatch_forward(const KernelContext&, std::span<const NdArray> in) {
  LOOM_ASSIGN_OR_RETURN(EinsumSizes n, dispatch_sizes(in));
  NdArray out(ir::Shape{n.e, n.g, n.c, n.h});
  for_each_term(n, [&](std::size_t token, std::size_t gate, std::size_t expert) {
    out.data[expert] += in[1].data[gate] * in[0].data[token];
  });
  return std::vector<NdArray>{std::move(out)};
}

Tensors dispatch_backward(const KernelContext&, std::span<const NdArray> in, std::span<const NdArray>,
                          std::span<const NdArray> grad_out) {
  LOOM_ASSIGN_OR_RETURN(EinsumSizes n, dispatch_sizes(in));
  if (grad_out.size() != 1 || grad_out[0].shape != ir::Shape{n.e, n.g, n.c, n.h})
    return fail("moe_dispatch: backward needs one output gradient [e g c h]");
  NdArray dx(in[0].shape);
  for_each_term(n, [&](std::size_t token, std::size_t gate, std::size_t expert) {
    dx.data[token] += in[1].data[gate] * grad_out[0].data[expert];
  });
  return std::vector<NdArray>{std::move(dx), NdArray{}};  // the dispatch mask gets no gradient
}

// einsum "gtec,egch->gth"
Tensors combine_forward(const KernelContext&, std::span<const NdArray> in) {
  LOOM_ASSIGN_OR_RETURN(EinsumSizes n, combine_sizes(in));
  NdArray out(ir::Shape{n.g, n.t, n.h});
  for_each_term(n, [&](std::size_t token, std::size_t gate, std::size_t expert) {
    out.data[token] += in[1].data[gate] * in[0].data[expert];
  });
  return std::vector<NdArray>{std::move(out)};
}

Tensors combine_backward(const KernelContext&, std::span<const NdArray> in, std::span<const NdArray>,
                         std::span<const NdArray> grad_out) {
  LOOM_ASSIGN_OR_RETURN(EinsumSizes n, combine_sizes(in));
  if (grad_out.size() != 1 || grad_out[0].shape != ir::Shape{n.g, n.t, n.h})
    return fail("moe_combine: backward needs one output gradient [g t h]");
  std::vector<NdArray> grads = {NdArray(in[0].shape), NdArray(in[1].shape)};
  for_each_term(n, [&](std::size_t token, std::size_t gate, std::size_t expert) {
    grads[0].data[expert] += in[1].data[gate] * grad_out[0].data[token];
    grads[1].data[gate] += in[0].data[expert] * grad_out[0].data[token];
  });
  return grads;
}


}  // namespace

void register_moe_kernels(KernelRegistry& r) {
  r.add("moe_gate", {gate_forward, gate_backward});
  r.add("moe_dispatch", {dispatch_forward, dispatch_backward});
  r.add("moe_combine", {combine_forward, combine_backward});
}

}  // namespace loom::verify
