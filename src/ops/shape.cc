// Data movement: reshapes, permutations, splits and joins. No FLOPs. Identifiers follow the data, so
// a plan that splits a dim before the op finds the same dim (by name) after it.
#include <algorithm>

#include "loom/core/checked_math.h"
#include "loom/ops/families.h"
#include "loom/ops/reshape_signature.h"
#include "loom/ops/signature_helpers.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;
using ir::Shape;

Expected<OpSignature> reshape_like(const OpCall& call, std::string_view op) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, op, "one input (x)"));
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> target, ir::get_int_list(call.attrs, "shape"));
  LOOM_ASSIGN_OR_RETURN(Shape to, resolve_target_shape(call.input_shapes[0], target, op));
  return reshape_signature(call.input_shapes[0], to, op);
}

Expected<OpSignature> flatten_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "flatten", "one input (x)"));
  const Shape& from = call.input_shapes[0];
  if (from.rank() == 0) return reshape_signature(from, Shape{1}, "flatten");
  LOOM_ASSIGN_OR_RETURN(std::int64_t start_attr, ir::get_int_or(call.attrs, "start_dim", 0));
  LOOM_ASSIGN_OR_RETURN(std::int64_t end_attr, ir::get_int_or(call.attrs, "end_dim", -1));
  LOOM_ASSIGN_OR_RETURN(std::size_t start, normalize_dim(start_attr, from.rank(), "flatten"));
  LOOM_ASSIGN_OR_RETURN(std::size_t end, normalize_dim(end_attr, from.rank(), "flatten"));
  if (start > end) return fail(fmt::format("flatten: start_dim {} comes after end_dim {}", start_attr, end_attr));
  Shape to;
  for (std::size_t k = 0; k < from.rank(); ++k) {
    if (k <= start || k > end)
      to.dims.push_back(from[k]);
    else
      to.dims.back() *= from[k];
  }
  return reshape_signature(from, to, "flatten");
}

Expected<OpSignature> unsqueeze_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "unsqueeze", "one input (x)"));
  const Shape& from = call.input_shapes[0];
  LOOM_ASSIGN_OR_RETURN(std::int64_t dim_attr, ir::get_int(call.attrs, "dim"));
  LOOM_ASSIGN_OR_RETURN(std::size_t dim, normalize_dim(dim_attr, from.rank() + 1, "unsqueeze"));
  Shape to = from;
  to.dims.insert(to.dims.begin() + static_cast<std::ptrdiff_t>(dim), 1);
  return reshape_signature(from, to, "unsqueeze");
}

// Without 'dim' every size-1 dim goes; with it, that dim must have size 1.
Expected<OpSignature> squeeze_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "squeeze", "one input (x)"));
  const Shape& from = call.input_shapes[0];
  Shape to;
  if (call.attrs.contains("dim")) {
    LOOM_ASSIGN_OR_RETURN(std::int64_t dim_attr, ir::get_int(call.attrs, "dim"));
    LOOM_ASSIGN_OR_RETURN(std::size_t dim, normalize_dim(dim_attr, from.rank(), "squeeze"));
    if (from[dim] != 1)
      return fail(fmt::format("squeeze: dim {} of {} has size {}, not 1", dim_attr, from.to_string(), from[dim]));
    to = from;
    to.dims.erase(to.dims.begin() + static_cast<std::ptrdiff_t>(dim));
  } else {
    for (std::int64_t d : from.dims)
      if (d != 1) to.dims.push_back(d);
  }
  return reshape_signature(from, to, "squeeze");
}

Expected<OpSignature> transpose_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "transpose", "one input (x)"));
  const std::size_t rank = call.input_shapes[0].rank();
  LOOM_ASSIGN_OR_RETURN(std::int64_t dim0_attr, ir::get_int(call.attrs, "dim0"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t dim1_attr, ir::get_int(call.attrs, "dim1"));
  LOOM_ASSIGN_OR_RETURN(std::size_t dim0, normalize_dim(dim0_attr, rank, "transpose"));
  LOOM_ASSIGN_OR_RETURN(std::size_t dim1, normalize_dim(dim1_attr, rank, "transpose"));
  const TensorDims in = indexed_dims(rank);
  TensorDims out = in;
  std::swap(out[dim0], out[dim1]);
  return OpSignature{annotation_text({in}, {out}), {}, {}};
}

Expected<OpSignature> permute_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "permute", "one input (x)"));
  const std::size_t rank = call.input_shapes[0].rank();
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> dims, ir::get_int_list(call.attrs, "dims"));
  if (dims.size() != rank)
    return fail(fmt::format("permute: 'dims' lists {} dims for a tensor of rank {}", dims.size(), rank),
                "give a permutation of all dims");
  const TensorDims in = indexed_dims(rank);
  TensorDims out;
  std::vector<bool> used(rank, false);
  for (std::int64_t d : dims) {
    LOOM_ASSIGN_OR_RETURN(std::size_t axis, normalize_dim(d, rank, "permute"));
    if (used[axis]) return fail(fmt::format("permute: dim {} appears twice in 'dims'", d), "give a permutation of all dims");
    used[axis] = true;
    out.push_back(in[axis]);
  }
  return OpSignature{annotation_text({in}, {out}), {}, {}};
}

// x split along `dim` into parts of the given sizes: the dim is frozen, part k is "p<k>^".
Expected<OpSignature> split_parts(const Shape& x, std::size_t dim, const std::vector<std::int64_t>& parts,
                                  std::string_view op) {
  std::int64_t total = 0;
  for (std::int64_t p : parts) {
    if (p <= 0) return fail(fmt::format("{}: part size {} must be positive", op, p));
    total = checked_add(total, p).value_or(ir::kMaxElements + 1);
  }
  if (total != x[dim])
    return fail(fmt::format("{}: parts add up to {}, but dim {} of {} has size {}", op, total, dim, x.to_string(), x[dim]));
  TensorDims in = indexed_dims(x.rank());
  OpSignature signature;
  std::vector<TensorDims> outputs;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    TensorDims out = in;
    out[dim] = fmt::format("p{}^", k);
    signature.sizes[fmt::format("p{}", k)] = parts[k];
    outputs.push_back(std::move(out));
  }
  in[dim] += '^';
  signature.annotation = annotation_text({in}, outputs);
  return signature;
}

Expected<OpSignature> split_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "split", "one input (x)"));
  const Shape& x = call.input_shapes[0];
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> parts, ir::get_int_list(call.attrs, "sizes"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t dim_attr, ir::get_int_or(call.attrs, "dim", 0));
  LOOM_ASSIGN_OR_RETURN(std::size_t dim, normalize_dim(dim_attr, x.rank(), "split"));
  return split_parts(x, dim, parts, "split");
}

// torch.chunk: parts of ceil(n / chunks), the last one smaller; possibly fewer than `chunks` parts.
Expected<OpSignature> chunk_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "chunk", "one input (x)"));
  const Shape& x = call.input_shapes[0];
  LOOM_ASSIGN_OR_RETURN(std::int64_t chunks, ir::get_int(call.attrs, "chunks"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t dim_attr, ir::get_int_or(call.attrs, "dim", 0));
  LOOM_ASSIGN_OR_RETURN(std::size_t dim, normalize_dim(dim_attr, x.rank(), "chunk"));
  if (chunks <= 0) return fail(fmt::format("chunk: 'chunks' = {} must be positive", chunks));
  const std::int64_t size = (x[dim] - 1) / chunks + 1;  // ceil(x / chunks) without overflow
  std::vector<std::int64_t> parts;
  for (std::int64_t left = x[dim]; left > 0; left -= size) parts.push_back(std::min(size, left));
  return split_parts(x, dim, parts, "chunk");
}

Expected<OpSignature> concat_signature(const OpCall& call) {
  if (call.input_shapes.empty()) return fail("concat takes at least one input");
  const std::size_t rank = call.input_shapes[0].rank();
  for (std::size_t t = 1; t < call.input_shapes.size(); ++t)
    if (call.input_shapes[t].rank() != rank)
      return fail(fmt::format("concat: input {} has shape {}, but input 0 has rank {}", t,
                              call.input_shapes[t].to_string(), rank));
  LOOM_ASSIGN_OR_RETURN(std::int64_t dim_attr, ir::get_int_or(call.attrs, "dim", 0));
  LOOM_ASSIGN_OR_RETURN(std::size_t dim, normalize_dim(dim_attr, rank, "concat"));
  OpSignature signature;
  std::vector<TensorDims> inputs;
  std::int64_t total = 0;
  for (std::size_t t = 0; t < call.input_shapes.size(); ++t) {
    TensorDims in = indexed_dims(rank);
    in[dim] = fmt::format("p{}^", t);
    total = checked_add(total, call.input_shapes[t][dim]).value_or(ir::kMaxElements + 1);
    inputs.push_back(std::move(in));
  }
  TensorDims out = indexed_dims(rank);
  out[dim] = "o^";
  signature.sizes["o"] = total;
  signature.annotation = annotation_text(inputs, {out});
  return signature;
}

// Python slicing x[start:end:step] along dim: negative indices count from the end, bounds clamp.
Expected<OpSignature> slice_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "slice", "one input (x)"));
  const Shape& x = call.input_shapes[0];
  LOOM_ASSIGN_OR_RETURN(std::int64_t dim_attr, ir::get_int(call.attrs, "dim"));
  LOOM_ASSIGN_OR_RETURN(std::size_t dim, normalize_dim(dim_attr, x.rank(), "slice"));
  const std::int64_t n = x[dim];
  LOOM_ASSIGN_OR_RETURN(std::int64_t start, ir::get_int_or(call.attrs, "start", 0));
  LOOM_ASSIGN_OR_RETURN(std::int64_t end, ir::get_int_or(call.attrs, "end", n));
  LOOM_ASSIGN_OR_RETURN(std::int64_t step, ir::get_int_or(call.attrs, "step", 1));
  if (step <= 0) return fail(fmt::format("slice: step {} must be positive", step));
  const auto clamp_index = [n](std::int64_t i) { return std::clamp(i < 0 ? i + n : i, std::int64_t{0}, n); };
  start = clamp_index(start);
  end = clamp_index(end);
  const std::int64_t length = end > start ? (end - start + step - 1) / step : 0;
  if (length == 0)
    return fail(fmt::format("slice: [{}:{}:{}] of dim {} (size {}) is empty", start, end, step, dim_attr, n));
  TensorDims in = indexed_dims(x.rank()), out = in;
  in[dim] += '^';
  out[dim] = "o^";
  return OpSignature{annotation_text({in}, {out}), {{"o", length}}, {}};
}

// torch.Tensor.expand: size-1 dims (and new leading dims) grow; -1 keeps a dim. The grown dims
// exist only in the output, so splitting them replicates the input.
Expected<OpSignature> expand_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "expand", "one input (x)"));
  const Shape& x = call.input_shapes[0];
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> target, ir::get_int_list(call.attrs, "shape"));
  if (target.size() < x.rank())
    return fail(fmt::format("expand: target shape has {} dims, fewer than {} of {}", target.size(), x.rank(), x.to_string()));
  const std::size_t lead = target.size() - x.rank();
  OpSignature signature;
  TensorDims in, out;
  for (std::size_t k = 0; k < target.size(); ++k) {
    const std::string name = fmt::format("d{}", k);
    const std::int64_t want = target[k];
    if (k < lead) {
      if (want <= 0) return fail(fmt::format("expand: new leading dim {} needs a positive size, got {}", k, want));
      signature.sizes[name] = want;
      out.push_back(name);
      continue;
    }
    const std::int64_t have = x[k - lead];
    if (want == -1 || want == have) {
      in.push_back(name);
    } else if (have == 1 && want > 0) {
      in.push_back("1");
      signature.sizes[name] = want;
    } else {
      return fail(fmt::format("expand: dim {} of {} has size {} and cannot become {}", k - lead, x.to_string(), have, want),
                  "only size-1 dims expand");
    }
    out.push_back(name);
  }
  signature.annotation = annotation_text({in}, {out});
  return signature;
}

ir::OpDef movement(std::string type, std::string summary, ir::SignatureFn signature, std::vector<ir::AttrSpec> attrs) {
  return {.type = std::move(type),
          .family = "shape",
          .summary = std::move(summary),
          .op_class = ir::OpClass::data_movement,
          .attrs = std::move(attrs),
          .signature = std::move(signature),
          .flops = ir::no_flops(),
          .backward = {.saves_inputs = false, .flops_factor = 1.0}};
}

}  // namespace

void register_shape_ops(OpRegistry& r) {
  const ir::AttrSpec shape_attr{"shape", ir::AttrKind::int_list, true, "target shape, at most one -1"};
  r.add_builtin(movement("reshape", "same elements, new shape",
                         [](const OpCall& call) { return reshape_like(call, "reshape"); }, {shape_attr}));
  r.add_builtin(movement("view", "reshape without a copy",
                         [](const OpCall& call) { return reshape_like(call, "view"); }, {shape_attr}));
  r.add_builtin(movement("flatten", "merge dims start_dim..end_dim into one", flatten_signature,
                         {{"start_dim", ir::AttrKind::integer, false, "first merged dim, default 0"},
                          {"end_dim", ir::AttrKind::integer, false, "last merged dim, default -1"}}));
  r.add_builtin(movement("unsqueeze", "insert a size-1 dim", unsqueeze_signature,
                         {{"dim", ir::AttrKind::integer, true, "where the new dim goes"}}));
  r.add_builtin(movement("squeeze", "remove size-1 dims", squeeze_signature,
                         {{"dim", ir::AttrKind::integer, false, "the dim to remove; all size-1 dims when absent"}}));
  r.add_builtin(movement("transpose", "swap two dims", transpose_signature,
                         {{"dim0", ir::AttrKind::integer, true, "first dim"},
                          {"dim1", ir::AttrKind::integer, true, "second dim"}}));
  r.add_builtin(movement("permute", "reorder dims", permute_signature,
                         {{"dims", ir::AttrKind::int_list, true, "output dim k is input dim dims[k]"}}));
  r.add_builtin(movement("split", "cut one dim into parts of the given sizes", split_signature,
                         {{"sizes", ir::AttrKind::int_list, true, "part sizes, adding up to the dim"},
                          {"dim", ir::AttrKind::integer, false, "the cut dim, default 0"}}));
  r.add_builtin(movement("chunk", "cut one dim into equal parts (the last may be smaller)", chunk_signature,
                         {{"chunks", ir::AttrKind::integer, true, "number of parts"},
                          {"dim", ir::AttrKind::integer, false, "the cut dim, default 0"}}));
  r.add_builtin(movement("concat", "join inputs along one dim", concat_signature,
                         {{"dim", ir::AttrKind::integer, false, "the joined dim, default 0"}}));
  r.add_builtin(movement("slice", "x[start:end:step] along one dim", slice_signature,
                         {{"dim", ir::AttrKind::integer, true, "the sliced dim"},
                          {"start", ir::AttrKind::integer, false, "first index, default 0"},
                          {"end", ir::AttrKind::integer, false, "one past the last index, default the dim size"},
                          {"step", ir::AttrKind::integer, false, "stride, default 1"}}));
  r.add_builtin(movement("expand", "broadcast copy to a larger shape", expand_signature,
                         {{"shape", ir::AttrKind::int_list, true, "target shape; -1 keeps a dim"}}));
  r.add_builtin(movement("contiguous", "dense copy", ir::fixed_signature("* -> *"), {}));
  r.add_builtin(movement("identity", "the input unchanged", ir::fixed_signature("* -> *"), {}));
}

}  // namespace loom::ops
