// Contractions: matmul (batch dims broadcast, a 2-D right operand shared by every batch), bmm,
// linear (torch's x W^T + b with weight [out, in]) and a general einsum evaluator.
#include <cctype>
#include <map>

#include "kernel_support.h"
#include "loom/verify/kernel_families.h"

namespace loom::verify {
namespace {

using namespace detail;

// C = A B; dA = G B^T and dB = A^T G, each summed back over the batch dims it was broadcast along.
Kernel matmul_kernel(std::string op, bool exact_rank3) {
  Kernel k;
  k.forward = [op, exact_rank3](const KernelContext&, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 2, op));
    if (exact_rank3 && (in[0].shape.rank() != 3 || in[1].shape.rank() != 3))
      return failf("{}: expects [b, m, k] and [b, k, n], got {} and {}", op, in[0].shape.to_string(), in[1].shape.to_string());
    LOOM_ASSIGN_OR_RETURN(NdArray c, batched_matmul(in[0], in[1], false, false, op));
    return Arrays{std::move(c)};
  };
  k.backward = [op](const KernelContext&, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 2, op));
    if (grads.size() != 1) return failf("{}: backward expects 1 output gradient", op);
    LOOM_ASSIGN_OR_RETURN(NdArray ga, batched_matmul(grads[0], in[1], false, true, op));
    LOOM_ASSIGN_OR_RETURN(NdArray gb, batched_matmul(in[0], grads[0], true, false, op));
    LOOM_ASSIGN_OR_RETURN(NdArray da, sum_to_shape(ga, in[0].shape));
    LOOM_ASSIGN_OR_RETURN(NdArray db, sum_to_shape(gb, in[1].shape));
    return Arrays{std::move(da), std::move(db)};
  };
  return k;
}

struct LinearDims {
  std::int64_t rows, in, out;
};

Expected<LinearDims> linear_dims(Inputs in) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 3, "linear"));
  const NdArray &x = in[0], &w = in[1];
  if (x.shape.rank() < 1 || w.shape.rank() != 2 || w.shape[1] != x.shape[x.shape.rank() - 1])
    return failf("linear: x {} and weight {} do not fit (weight is [out, in])", x.shape.to_string(), w.shape.to_string());
  if (in.size() == 3 && in[2].shape != ir::Shape{w.shape[0]})
    return failf("linear: bias {} must be [{}]", in[2].shape.to_string(), w.shape[0]);
  const std::int64_t features = w.shape[1];
  return LinearDims{x.numel() / features, features, w.shape[0]};
}

Kernel linear_kernel() {
  Kernel k;
  k.forward = [](const KernelContext&, Inputs in) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(LinearDims d, linear_dims(in));
    ir::Shape shape = in[0].shape;
    shape.dims.back() = d.out;
    NdArray y(shape);
    for (std::int64_t r = 0; r < d.rows; ++r)
      for (std::int64_t o = 0; o < d.out; ++o) {
        double sum = in.size() == 3 ? in[2].data[static_cast<std::size_t>(o)] : 0.0;
        for (std::int64_t i = 0; i < d.in; ++i)
          sum += in[0].data[static_cast<std::size_t>(r * d.in + i)] * in[1].data[static_cast<std::size_t>(o * d.in + i)];
        y.data[static_cast<std::size_t>(r * d.out + o)] = sum;
      }
    return Arrays{std::move(y)};
  };
  k.backward = [](const KernelContext&, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(LinearDims d, linear_dims(in));
    ir::Shape y_shape = in[0].shape;
    y_shape.dims.back() = d.out;
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, y_shape, "linear"));
    NdArray dx(in[0].shape), dw(in[1].shape), db(ir::Shape{d.out});
    for (std::int64_t r = 0; r < d.rows; ++r)
      for (std::int64_t o = 0; o < d.out; ++o) {
        const double gv = g->data[static_cast<std::size_t>(r * d.out + o)];
        db.data[static_cast<std::size_t>(o)] += gv;
        for (std::int64_t i = 0; i < d.in; ++i) {
          dx.data[static_cast<std::size_t>(r * d.in + i)] += gv * in[1].data[static_cast<std::size_t>(o * d.in + i)];
          dw.data[static_cast<std::size_t>(o * d.in + i)] += gv * in[0].data[static_cast<std::size_t>(r * d.in + i)];
        }
      }
    Arrays result{std::move(dx), std::move(dw)};
    if (in.size() == 3) result.push_back(std::move(db));
    return result;
  };
  return k;
}

// A parsed einsum: per operand and for the output, the position of each of its letters in `letters`.
struct Einsum {
  std::vector<std::vector<std::size_t>> operands;
  std::vector<std::size_t> output;
  ir::Shape space;  // size of every distinct letter: the iteration space
};

Expected<Einsum> parse_einsum(const ir::Attrs& attrs, Inputs in) {
  const Expected<std::string> equation = attr(ir::get_string(attrs, "equation"), "einsum");
  if (!equation) return std::unexpected(equation.error());
  const std::size_t arrow = equation->find("->");
  if (arrow == std::string::npos) return failf("einsum: equation '{}' has no '->'", *equation);
  std::map<char, std::size_t> position;
  Einsum e;
  const auto letter = [&](char c, std::int64_t size) -> Expected<std::size_t> {
    auto [it, added] = position.emplace(c, e.space.rank());
    if (added) e.space.dims.push_back(size);
    else if (size >= 0 && e.space.dims[it->second] != size)
      return failf("einsum: '{}' has sizes {} and {} in '{}'", c, e.space.dims[it->second], size, *equation);
    return it->second;
  };
  e.operands.emplace_back();
  for (char c : equation->substr(0, arrow)) {
    if (c == ' ') continue;
    if (c == ',') {
      e.operands.emplace_back();
      continue;
    }
    if (!std::isalpha(static_cast<unsigned char>(c))) return failf("einsum: unexpected '{}' in '{}'", c, *equation);
    const std::size_t t = e.operands.size() - 1;
    if (t >= in.size()) return failf("einsum: '{}' names more operands than the {} given", *equation, in.size());
    const std::size_t axis = e.operands[t].size();
    if (axis >= in[t].shape.rank())
      return failf("einsum: operand {} has shape {}, fewer dims than '{}' names", t, in[t].shape.to_string(), *equation);
    LOOM_ASSIGN_OR_RETURN(std::size_t p, letter(c, in[t].shape[axis]));
    e.operands[t].push_back(p);
  }
  if (e.operands.size() != in.size()) return failf("einsum: '{}' names {} operands, {} given", *equation, e.operands.size(), in.size());
  for (std::size_t t = 0; t < in.size(); ++t)
    if (e.operands[t].size() != in[t].shape.rank())
      return failf("einsum: operand {} has shape {}, but '{}' names {} dims", t, in[t].shape.to_string(), *equation, e.operands[t].size());
  for (char c : equation->substr(arrow + 2)) {
    if (c == ' ') continue;
    if (!position.contains(c)) return failf("einsum: output letter '{}' of '{}' is on no input", c, *equation);
    e.output.push_back(position[c]);
  }
  return e;
}

// Strides reading a tensor with letters `dims` from an index of the whole letter space (a letter
// repeated on one operand adds its strides: the diagonal).
std::vector<std::int64_t> space_strides(const std::vector<std::size_t>& dims, const ir::Shape& shape, std::size_t space_rank) {
  const std::vector<std::int64_t> own = strides_of(shape);
  std::vector<std::int64_t> strides(space_rank, 0);
  for (std::size_t k = 0; k < dims.size(); ++k) strides[dims[k]] += own[k];
  return strides;
}

ir::Shape output_shape(const Einsum& e) {
  ir::Shape shape;
  for (std::size_t p : e.output) shape.dims.push_back(e.space[p]);
  return shape;
}

Kernel einsum_kernel() {
  Kernel k;
  k.forward = [](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Einsum e, parse_einsum(ctx.attrs, in));
    NdArray y(output_shape(e));
    std::vector<std::vector<std::int64_t>> strides;
    for (std::size_t t = 0; t < in.size(); ++t) strides.push_back(space_strides(e.operands[t], in[t].shape, e.space.rank()));
    const std::vector<std::int64_t> out_strides = space_strides(e.output, y.shape, e.space.rank());
    for_each_index(e.space, [&](std::span<const std::int64_t> index) {
      double product = 1;
      for (std::size_t t = 0; t < in.size(); ++t) product *= in[t].data[static_cast<std::size_t>(flat_offset(index, strides[t]))];
      y.data[static_cast<std::size_t>(flat_offset(index, out_strides))] += product;
    });
    return Arrays{std::move(y)};
  };
  // d operand t = sum over the space of g[out] * prod of the other operands.
  k.backward = [](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Einsum e, parse_einsum(ctx.attrs, in));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, output_shape(e), "einsum"));
    std::vector<std::vector<std::int64_t>> strides;
    Arrays result;
    for (std::size_t t = 0; t < in.size(); ++t) {
      strides.push_back(space_strides(e.operands[t], in[t].shape, e.space.rank()));
      result.emplace_back(in[t].shape);
    }
    const std::vector<std::int64_t> out_strides = space_strides(e.output, g->shape, e.space.rank());
    for_each_index(e.space, [&](std::span<const std::int64_t> index) {
      const double gv = g->data[static_cast<std::size_t>(flat_offset(index, out_strides))];
      for (std::size_t t = 0; t < in.size(); ++t) {
        double product = gv;
        for (std::size_t s = 0; s < in.size(); ++s)
          if (s != t) product *= in[s].data[static_cast<std::size_t>(flat_offset(index, strides[s]))];
        result[t].data[static_cast<std::size_t>(flat_offset(index, strides[t]))] += product;
      }
    });
    return result;
  };
  return k;
}

}  // namespace

void register_linalg_kernels(KernelRegistry& r) {
  r.add("matmul", matmul_kernel("matmul", false));
  r.add("bmm", matmul_kernel("bmm", true));
  r.add("linear", linear_kernel());
  r.add("einsum", einsum_kernel());
}

}  // namespace loom::verify
