"""Loom registry op types as torch calls: the op forms that the runtime executes and `loom profile` times.

Each entry turns one op instance (its attributes and the local shapes of its inputs and outputs) into a
callable over the input tensors that returns the op's outputs as a tuple. Whatever an implementation
would precompute once (rotary tables, Swin's relative-position index) is built here, outside the
callable. Data movement ops return contiguous tensors: the engine's cost model charges them for the bytes
they read and write, which is what a materialized result costs. Forms see local shapes only; the runtime
wraps the ops whose result depends on where a shard sits (runtime/placed_ops.py).

INDEX_INPUTS says which integer inputs index which input dimension (embedding ids, labels), so random
inputs stay in range; POSITIVE_INPUTS lists the ops whose inputs must be positive.
"""

import torch
import torch.nn.functional as F

# op type -> builder(attrs, inputs, outputs) -> callable(*tensors) -> tuple of tensors.
# `inputs` and `outputs` are lists of (shape, torch dtype); `attrs` a dict.
BUILDERS = {}
# op type -> {input index: (other input index, its dimension)}: the integer input holds indices below that size.
INDEX_INPUTS = {}
# op types whose floating inputs must be positive.
POSITIVE_INPUTS = {"log", "sqrt", "rsqrt", "pow", "cross_entropy_from_parts", "batch_norm_centered_sums",
                   "batch_norm_from_sums"}


class Unsupported(Exception):
    """There is no torch form for this op instance; the message says why."""


def op(*names, indices=None):
    def register(builder):
        for name in names:
            BUILDERS[name] = builder
            if indices:
                INDEX_INPUTS[name] = indices
        return builder

    return register


def as_tuple(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def pair(attrs, name, default):
    value = attrs.get(name, default)
    if isinstance(value, int):
        return (value, value)
    return (value[0], value[0]) if len(value) == 1 else (value[0], value[1])


def dim_list(attrs, name):
    value = attrs.get(name)
    return None if value is None else list(value)


# --- linear algebra -------------------------------------------------------------------------------


@op("linear")
def _linear(attrs, inputs, outputs):
    return lambda x, w, b=None: (F.linear(x, w, b),)


@op("matmul")
def _matmul(attrs, inputs, outputs):
    return lambda a, b: (torch.matmul(a, b),)


@op("bmm")
def _bmm(attrs, inputs, outputs):
    return lambda a, b: (torch.bmm(a, b),)


@op("einsum")
def _einsum(attrs, inputs, outputs):
    equation = attrs["equation"]
    return lambda *xs: (torch.einsum(equation, *xs),)


# --- elementwise and activations ------------------------------------------------------------------

_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}
_UNARY = {
    "abs": torch.abs, "exp": torch.exp, "log": torch.log, "neg": torch.neg, "rsqrt": torch.rsqrt,
    "sigmoid": torch.sigmoid, "sqrt": torch.sqrt, "square": torch.square, "tanh": torch.tanh,
    "relu": F.relu, "silu": F.silu,
}


def _binary_builder(fn):
    return lambda attrs, inputs, outputs: (lambda a, b: (fn(a, b),))


def _unary_builder(fn):
    return lambda attrs, inputs, outputs: (lambda x: (fn(x),))


for _name, _fn in _BINARY.items():
    BUILDERS[_name] = _binary_builder(_fn)
for _name, _fn in _UNARY.items():
    BUILDERS[_name] = _unary_builder(_fn)


@op("gelu")
def _gelu(attrs, inputs, outputs):
    approximate = attrs.get("approximate", "none")
    return lambda x: (F.gelu(x, approximate=approximate),)


@op("swiglu")
def _swiglu(attrs, inputs, outputs):
    return lambda gate, up: (F.silu(gate) * up,)


@op("geglu")
def _geglu(attrs, inputs, outputs):
    return lambda gate, up: (F.gelu(gate) * up,)


@op("dropout")
def _dropout(attrs, inputs, outputs):
    p = float(attrs.get("p", 0.1))
    return lambda x: (F.dropout(x, p=p, training=True),)


def _softmax_builder(fn):
    return lambda attrs, inputs, outputs: (lambda x: (fn(x, int(attrs.get("dim", -1))),))


BUILDERS["softmax"] = _softmax_builder(torch.softmax)
BUILDERS["log_softmax"] = _softmax_builder(torch.log_softmax)


@op("scale")
def _scale(attrs, inputs, outputs):
    factor = float(attrs["factor"])
    return lambda x: (x * factor,)


@op("pow")
def _pow(attrs, inputs, outputs):
    exponent = float(attrs["exponent"])
    return lambda x: (torch.pow(x, exponent),)


@op("clamp")
def _clamp(attrs, inputs, outputs):
    low, high = attrs.get("min"), attrs.get("max")
    return lambda x: (torch.clamp(x, low, high),)


@op("masked_fill")
def _masked_fill(attrs, inputs, outputs):
    value = float(attrs["value"])
    return lambda x, mask: (x.masked_fill(mask, value),)


@op("where")
def _where(attrs, inputs, outputs):
    return lambda cond, a, b: (torch.where(cond, a, b),)


@op("cast")
def _cast(attrs, inputs, outputs):
    dtype = outputs[0][1]
    return lambda x: (x.to(dtype),)


# --- normalization --------------------------------------------------------------------------------


@op("layer_norm")
def _layer_norm(attrs, inputs, outputs):
    eps = float(attrs.get("eps", 1e-5))
    hidden = [inputs[0][0][-1]]
    return lambda x, w, b=None: (F.layer_norm(x, hidden, w, b, eps),)


@op("rms_norm")
def _rms_norm(attrs, inputs, outputs):
    eps = float(attrs.get("eps", 1e-5))
    hidden = [inputs[0][0][-1]]
    if hasattr(F, "rms_norm"):
        return lambda x, w: (F.rms_norm(x, hidden, w, eps),)
    return lambda x, w: (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w,)


@op("batch_norm")
def _batch_norm(attrs, inputs, outputs):
    eps = float(attrs.get("eps", 1e-5))
    momentum = float(attrs.get("momentum", 0.1))
    return lambda x, w=None, b=None: (F.batch_norm(x, None, None, w, b, True, momentum, eps),)


# Training batch norm in batch-splittable parts (src/ops/batch_norm_parts.cc): per-channel sums over
# the batch and space of this shard (the plan adds the shards' parts), then the normalization. The
# statistics are float32; the count and the centering mean take no gradient (the engine's rule).
def _channel_view(x):
    return [1, -1] + [1] * (x.dim() - 2)


def _batch_dims(x):
    return [0] + list(range(2, x.dim()))


def _at_least_f32(x):
    """Statistics in float32, or in float64 for a float64 graph (float32 there would round its batch norm)."""
    return x if x.dtype == torch.float64 else x.float()


@op("batch_norm_sums")
def _batch_norm_sums(attrs, inputs, outputs):
    def run(x):
        per_channel = x.numel() // x.shape[1] if x.shape[1] else 0
        return _at_least_f32(x).sum(_batch_dims(x)), torch.full((x.shape[1],), float(per_channel), device=x.device)

    return run


@op("batch_norm_centered_sums")
def _batch_norm_centered_sums(attrs, inputs, outputs):
    def run(x, total, count):
        mean = (total / count).detach().view(_channel_view(x))
        return (_at_least_f32(x) - mean).square().sum(_batch_dims(x)),

    return run


@op("batch_norm_from_sums")
def _batch_norm_from_sums(attrs, inputs, outputs):
    eps = float(attrs.get("eps", 1e-5))

    def run(x, total, squares, count, w, b):
        count = count.detach()
        shape = _channel_view(x)
        mean, inv_std = (total / count).view(shape), torch.rsqrt(squares / count + eps).view(shape)
        return ((_at_least_f32(x) - mean) * inv_std * _at_least_f32(w).view(shape)
                + _at_least_f32(b).view(shape)).to(x.dtype),

    return run


@op("group_norm")
def _group_norm(attrs, inputs, outputs):
    eps = float(attrs.get("eps", 1e-5))
    groups = int(attrs["groups"])
    return lambda x, w=None, b=None: (F.group_norm(x, groups, w, b, eps),)


# --- attention ------------------------------------------------------------------------------------


@op("scaled_dot_product_attention")
def _sdpa(attrs, inputs, outputs):
    causal = bool(attrs.get("causal", False))
    scale = attrs.get("scale")
    dropout = float(attrs.get("dropout", 0.0))
    gqa = inputs[0][0][1] != inputs[1][0][1]
    if causal and len(inputs) == 4:
        raise Unsupported("causal attention with an additive bias has no single torch call")
    extra = {"enable_gqa": True} if gqa else {}

    def run(q, k, v, bias=None):
        return (F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout, is_causal=causal,
                                               scale=scale, **extra),)

    return run


@op("rotary_embedding")
def _rotary(attrs, inputs, outputs):
    (b, h, s, d), dtype = inputs[0]
    base = float(attrs.get("base", 10000.0))
    half = d // 2
    # HF LLaMA's rotate-half form; the tables are cached by a real implementation, so built here once.
    inv = base ** (-torch.arange(0, half, dtype=torch.float32) * 2.0 / d)
    angles = torch.arange(s, dtype=torch.float32)[:, None] * inv[None, :]
    tables = {}

    def run(x):
        key = (x.device, x.dtype)
        if key not in tables:
            tables[key] = (angles.cos().to(x.device, x.dtype), angles.sin().to(x.device, x.dtype))
        cos, sin = tables[key]
        x1, x2 = x[..., :half], x[..., half:]
        return (torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1),)

    return run


# --- embedding and losses -------------------------------------------------------------------------


@op("embedding", indices={0: (1, 0)})
def _embedding(attrs, inputs, outputs):
    return lambda ids, w: (F.embedding(ids, w),)


@op("cross_entropy", indices={1: (0, -1)})
def _cross_entropy(attrs, inputs, outputs):
    ignore = int(attrs.get("ignore_index", -100))
    smoothing = float(attrs.get("label_smoothing", 0.0))
    return lambda logits, labels: (
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=ignore,
                        label_smoothing=smoothing).float(),)


# Cross entropy in vocabulary-splittable parts (src/ops/cross_entropy_parts.cc); the shift is detached.
def _target(x, labels, ignore, smoothing):
    valid = labels != ignore
    z = x.gather(-1, torch.where(valid, labels, 0).unsqueeze(-1)).squeeze(-1)
    if smoothing:
        z = (1 - smoothing) * z + smoothing * x.mean(-1)
    return torch.where(valid, z, torch.zeros_like(z))


@op("target_logit", indices={1: (0, -1)})
def _target_logit(attrs, inputs, outputs):
    ignore = int(attrs.get("ignore_index", -100))
    smoothing = float(attrs.get("label_smoothing", 0.0))
    return lambda logits, labels: (_target(logits.float(), labels, ignore, smoothing),)


@op("cross_entropy_parts", indices={1: (0, -1)})
def _cross_entropy_parts(attrs, inputs, outputs):
    ignore = int(attrs.get("ignore_index", -100))
    smoothing = float(attrs.get("label_smoothing", 0.0))

    def run(logits, labels, shift):
        x = logits.float()
        return (torch.exp(x - shift.detach().unsqueeze(-1)).sum(-1), _target(x, labels, ignore, smoothing))

    return run


@op("cross_entropy_from_parts")
def _cross_entropy_from_parts(attrs, inputs, outputs):
    ignore = int(attrs.get("ignore_index", -100))

    def run(sums, shift, target, labels):
        valid = (labels != ignore).float()
        per_token = torch.log(sums.float()) + shift.detach().float() - target.float()
        return ((per_token * valid).sum() / valid.sum().clamp(min=1)).float(),

    return run


@op("nll_loss", indices={1: (0, -1)})
def _nll_loss(attrs, inputs, outputs):
    ignore = int(attrs.get("ignore_index", -100))
    return lambda logp, labels: (
        F.nll_loss(logp.reshape(-1, logp.shape[-1]), labels.reshape(-1), ignore_index=ignore).float(),)


@op("mse_loss")
def _mse_loss(attrs, inputs, outputs):
    return lambda pred, target: (F.mse_loss(pred, target).float(),)


# --- reductions -----------------------------------------------------------------------------------


def _reduction(fn):
    def build(attrs, inputs, outputs):
        dims = dim_list(attrs, "dims")
        keep = bool(attrs.get("keepdim", False))
        if dims is None:
            dims = list(range(len(inputs[0][0])))
        return lambda x: (fn(x, dims, keep),)

    return build


BUILDERS["sum"] = _reduction(lambda x, d, k: torch.sum(x, d, keepdim=k))
BUILDERS["mean"] = _reduction(lambda x, d, k: torch.mean(x, d, keepdim=k))
BUILDERS["amax"] = _reduction(lambda x, d, k: torch.amax(x, d, keepdim=k))
BUILDERS["max"] = _reduction(lambda x, d, k: torch.amax(x, d, keepdim=k))


@op("argmax")
def _argmax(attrs, inputs, outputs):
    dim = attrs.get("dim")
    keep = bool(attrs.get("keepdim", False))
    return lambda x: (torch.argmax(x, dim, keepdim=keep) if dim is not None else torch.argmax(x),)


# --- shape and data movement ----------------------------------------------------------------------


def _contiguous(*xs):
    return tuple(x.contiguous() for x in xs)


@op("reshape", "view", "flatten", "squeeze", "unsqueeze")
def _reshape(attrs, inputs, outputs):
    # The local output shape is what matters: attributes name the whole tensor's shape.
    shape = outputs[0][0]
    return lambda x: _contiguous(x.reshape(shape))


@op("identity")
def _identity(attrs, inputs, outputs):
    return lambda x: (x,)


@op("contiguous")
def _copy(attrs, inputs, outputs):
    # The input is contiguous already; a dense copy is what the op costs.
    return lambda x: (x.clone(),)


@op("transpose")
def _transpose(attrs, inputs, outputs):
    a, b = int(attrs["dim0"]), int(attrs["dim1"])
    return lambda x: _contiguous(x.transpose(a, b))


@op("permute")
def _permute(attrs, inputs, outputs):
    dims = list(attrs["dims"])
    return lambda x: _contiguous(x.permute(dims))


@op("expand")
def _expand(attrs, inputs, outputs):
    shape = outputs[0][0]
    return lambda x: _contiguous(x.expand(shape))


@op("chunk", "split")
def _split(attrs, inputs, outputs):
    rank = len(inputs[0][0])
    dim = int(attrs.get("dim", 0)) % rank
    sizes = [shape[dim] for shape, _ in outputs]
    return lambda x: _contiguous(*torch.split(x, sizes, dim))


@op("concat")
def _concat(attrs, inputs, outputs):
    dim = int(attrs.get("dim", 0))
    return lambda *xs: (torch.cat(xs, dim),)


@op("slice")
def _slice(attrs, inputs, outputs):
    rank = len(inputs[0][0])
    dim = int(attrs["dim"]) % rank
    step = int(attrs.get("step", 1))
    n = inputs[0][0][dim]
    start = int(attrs.get("start", 0))
    start = min(max(start + n if start < 0 else start, 0), n)  # whole tensors here; shards: placed_ops
    length = outputs[0][0][dim]
    index = [slice(None)] * rank
    index[dim] = slice(start, start + (length - 1) * step + 1, step)
    return lambda x: _contiguous(x[tuple(index)])


# --- convolution and pooling ----------------------------------------------------------------------


@op("conv2d")
def _conv2d(attrs, inputs, outputs):
    stride, padding = pair(attrs, "stride", 1), pair(attrs, "padding", 0)
    dilation, groups = pair(attrs, "dilation", 1), int(attrs.get("groups", 1))
    (x_shape, _), (w_shape, _) = inputs[0], inputs[1]
    if groups > 1 and x_shape[1] < w_shape[1] * groups:
        # A shard of the channels holds whole groups (the signature splits g, never a group's channels): the
        # attribute counts the whole op's, the shard has as many as its input channels make.
        groups = x_shape[1] // w_shape[1]
    return lambda x, w, b=None: (F.conv2d(x, w, b, stride, padding, dilation, groups),)


@op("conv_transpose2d")
def _conv_transpose2d(attrs, inputs, outputs):
    stride, padding = pair(attrs, "stride", 1), pair(attrs, "padding", 0)
    extra, dilation = pair(attrs, "output_padding", 0), pair(attrs, "dilation", 1)
    return lambda x, w, b=None: (F.conv_transpose2d(x, w, b, stride, padding, extra, 1, dilation),)


def _pool_builder(fn):
    def build(attrs, inputs, outputs):
        kernel = pair(attrs, "kernel", 1)
        stride = pair(attrs, "stride", list(kernel))
        padding = pair(attrs, "padding", 0)
        return lambda x: (fn(x, kernel, stride, padding),)

    return build


BUILDERS["max_pool2d"] = _pool_builder(F.max_pool2d)
BUILDERS["avg_pool2d"] = _pool_builder(F.avg_pool2d)


@op("adaptive_avg_pool2d")
def _adaptive_pool(attrs, inputs, outputs):
    size = pair(attrs, "output_size", 1)
    return lambda x: (F.adaptive_avg_pool2d(x, size),)


@op("upsample_nearest2d")
def _upsample(attrs, inputs, outputs):
    scale = int(attrs["scale"])
    return lambda x: (F.interpolate(x, scale_factor=scale, mode="nearest"),)


# --- comparisons, scans, gathers, resizing and padding --------------------------------------------


def _comparison(compare):
    return lambda attrs, inputs, outputs: (lambda a, b: (compare(a, b),))


for _name, _compare in {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt,
                        "ge": torch.ge, "maximum": torch.maximum, "minimum": torch.minimum}.items():
    op(_name)(_comparison(_compare))


@op("cumsum")
def _cumsum(attrs, inputs, outputs):
    dim = int(attrs["dim"])
    return lambda x: (torch.cumsum(x, dim),)


@op("index_select")
def _index_select(attrs, inputs, outputs):
    dim = int(attrs["dim"])
    return lambda x, index: (torch.index_select(x, dim, index),)


@op("upsample_bilinear2d")
def _upsample_bilinear2d(attrs, inputs, outputs):
    size, align = tuple(int(s) for s in attrs["output_size"]), bool(attrs.get("align_corners", False))
    return lambda x: (F.interpolate(x, size=size, mode="bilinear", align_corners=align),)


@op("pad")
def _pad(attrs, inputs, outputs):
    pads, value = [int(p) for p in attrs["pads"]], float(attrs.get("value", 0.0))
    return lambda x: (F.pad(x, pads, mode="constant", value=value),)


# --- Swin -----------------------------------------------------------------------------------------


@op("window_partition")
def _window_partition(attrs, inputs, outputs):
    ws = int(attrs["window_size"])
    (b, h, w, c), _ = inputs[0]
    return lambda x: (x.view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c),)


@op("window_reverse")
def _window_reverse(attrs, inputs, outputs):
    ws = int(attrs["window_size"])
    (b, h, w, c), _ = outputs[0]  # the local map; the attributes give the whole one
    return lambda x: (x.view(b, h // ws, w // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c),)


@op("cyclic_shift")
def _cyclic_shift(attrs, inputs, outputs):
    shift = int(attrs["shift"])
    return lambda x: (torch.roll(x, (shift, shift), (1, 2)),)


@op("patch_merging")
def _patch_merging(attrs, inputs, outputs):
    # Channel c * 4 + k holds 2x2 offset k in Swin's order (0,0), (1,0), (0,1), (1,1) as (dy, dx).
    def run(x):
        parts = (x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2])
        return (torch.stack(parts, dim=-1).flatten(-2),)

    return run


@op("relative_position_bias")
def _relative_position_bias(attrs, inputs, outputs):
    ws = int(attrs["window_size"])
    coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")).flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (ws - 1)
    index = (rel[..., 0] * (2 * ws - 1) + rel[..., 1]).reshape(-1)
    cached = {}

    def run(table):
        if table.device not in cached:
            cached[table.device] = index.to(table.device)
        heads = table.shape[1]
        return (table[cached[table.device]].view(ws * ws, ws * ws, heads).permute(2, 0, 1).contiguous(),)

    return run


# --- mixture of experts ---------------------------------------------------------------------------


@op("moe_dispatch")
def _moe_dispatch(attrs, inputs, outputs):
    return lambda x, mask: (torch.einsum("gth,gtec->egch", x, mask.to(x.dtype)),)


@op("moe_combine")
def _moe_combine(attrs, inputs, outputs):
    return lambda expert_out, weights: (torch.einsum("egch,gtec->gth", expert_out, weights.to(expert_out.dtype)),)


# --- autograd helpers -----------------------------------------------------------------------------


@op("accumulate")
def _accumulate(attrs, inputs, outputs):
    def run(*xs):
        total = xs[0] + xs[1] if len(xs) > 1 else xs[0].clone()
        for x in xs[2:]:
            total = total + x
        return (total,)

    return run


@op("recycle_detach")
def _recycle_detach(attrs, inputs, outputs):
    return lambda x: (x.detach(),)


@op("fill_like")
def _fill_like(attrs, inputs, outputs):
    value = float(attrs.get("value", 1.0))
    return lambda x: (torch.full_like(x, value),)


# --- optimizers -----------------------------------------------------------------------------------
# Inputs: param, grad, [fp32 master], states. With master weights the update runs on the master copy
# (the 16-bit gradient cast to fp32 first) and the result is copied back into the 16-bit parameter, as
# mixed-precision training does. Adam-style steps use torch's fused kernel where the build has one.


def _adam_builder(decoupled):
    def build(attrs, inputs, outputs):
        master = bool(attrs.get("master_weights", False))
        lr = float(attrs.get("lr", 1e-3))
        beta1, beta2 = float(attrs.get("beta1", 0.9)), float(attrs.get("beta2", 0.999))
        eps = float(attrs.get("eps", 1e-8))
        decay = float(attrs.get("weight_decay", 1e-2 if decoupled else 0.0))
        fused = torch._fused_adamw_ if decoupled else torch._fused_adam_
        step = int(attrs.get("step", 1))  # the optimizer's step number (the runtime counts steps)
        steps = {}

        def run(param, grad, *rest):
            weights = rest[0] if master else param
            m, v = rest[-2], rest[-1]
            g = grad.to(weights.dtype) if grad.dtype != weights.dtype else grad
            if weights.device not in steps:
                steps[weights.device] = torch.full((), float(step), dtype=torch.float32, device=weights.device)
            try:
                fused([weights], [g], [m], [v], [], [steps[weights.device]], lr=lr, beta1=beta1, beta2=beta2,
                      weight_decay=decay, eps=eps, amsgrad=False, maximize=False)
            except (RuntimeError, NotImplementedError):
                _adam_step(weights, g, m, v, lr, beta1, beta2, eps, decay, decoupled, step)
            if master:
                param.copy_(weights)
            return (param, *rest)

        return run

    return build


def _adam_step(p, g, m, v, lr, beta1, beta2, eps, decay, decoupled, step=1):
    """Step `step` of torch.optim.Adam(W) (foreach=False), in place."""
    if decoupled:
        p.mul_(1 - lr * decay)
    elif decay:
        g = g + decay * p
    m.lerp_(g, 1 - beta1)
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    denom = (v / (1 - beta2 ** step)).sqrt_().add_(eps)
    p.addcdiv_(m, denom, value=-lr / (1 - beta1 ** step))


BUILDERS["adam"] = _adam_builder(False)
BUILDERS["adamw"] = _adam_builder(True)


@op("sgd")
def _sgd(attrs, inputs, outputs):
    master = bool(attrs.get("master_weights", False))
    lr = float(attrs.get("lr", 1e-3))
    decay = float(attrs.get("weight_decay", 0.0))
    momentum = float(attrs.get("momentum", 0.0))

    def run(param, grad, *rest):
        weights = rest[0] if master else param
        g = grad.to(weights.dtype)
        if decay:
            g = g + decay * weights
        if momentum > 0:
            buf = rest[-1]
            buf.mul_(momentum).add_(g)
            g = buf
        weights.add_(g, alpha=-lr)
        if master:
            param.copy_(weights)
        return (param, *rest)

    return run


NOT_DIFFERENTIABLE = {"adam", "adamw", "sgd", "fill_like", "argmax", "recycle_detach"}
NOT_DIFFERENTIABLE.update({"eq", "ne", "lt", "le", "gt", "ge"})  # boolean outputs
UNSUPPORTED_REASONS = {
    "moe_gate": "top-k gating with capacity has no single torch call; time the MoE model's gate separately",
    "msa_row_attention_with_pair_bias": "AlphaFold kernels are not mapped to torch here",
    "msa_column_attention": "AlphaFold kernels are not mapped to torch here",
    "triangle_attention": "AlphaFold kernels are not mapped to torch here",
    "triangle_multiplication": "AlphaFold kernels are not mapped to torch here",
    "outer_product_mean": "AlphaFold kernels are not mapped to torch here",
}


def build(op_type, attrs, inputs, outputs):
    """The callable for one instance; raises Unsupported when there is none."""
    if op_type in UNSUPPORTED_REASONS:
        raise Unsupported(UNSUPPORTED_REASONS[op_type])
    if op_type.startswith("custom.") and "callable" in attrs:  # loom.register_op: the user's function itself
        from ..custom_ops import import_callable
        fn = import_callable(attrs["callable"])
        return lambda *xs: as_tuple(fn(*xs))
    builder = BUILDERS.get(op_type)
    if builder is None:
        raise Unsupported(f"no torch form for op type '{op_type}'")
    return builder(attrs, inputs, outputs)


def positive_inputs(op_type):
    return op_type in POSITIVE_INPUTS


def index_bounds(op_type, inputs):
    """{input index: exclusive upper bound} for integer inputs that index another input's dimension."""
    bounds = {}
    for index, (other, dim) in INDEX_INPUTS.get(op_type, {}).items():
        if index < len(inputs) and other < len(inputs):
            bounds[index] = inputs[other][0][dim]
    return bounds


def attr_value(value):
    """An attribute as the request wrote it; non-finite floats come as the strings "nan", "inf", "-inf"."""
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    return value
