"""Closed-form backward rules: the input gradients of an op from its saved tensors and output gradients,
without rerunning the forward under autograd (which costs a forward, an autograd graph and its bookkeeping
per backward sub-op: 28 % of a data-parallel GPT-2 step before these rules).

One table, RULES: op type -> builder(BackwardContext) -> rule(inputs, outputs, grads) -> one gradient per
entry of ctx.grad_inputs (None: zero), or the builder returns None when it has no closed form for this
instance (the runtime then uses autograd over the forward form, as before). Each rule computes what
torch's autograd formula for the same forward computes (the same aten calls where torch has them:
native_layer_norm_backward, gelu_backward, embedding's index_add), so results agree to the last bit in most
cases and to rounding otherwise; python/tests/test_backward_forms.py checks every rule against autograd
over random shapes.

`inputs` are the forward inputs the mirror layout saved (zeros-free: None where the engine saved none),
`outputs` the saved forward outputs (None where not saved), `grads[k]` the gradient of forward output k
(None where the backward reads none). Pure index ops need no saved tensor at all.
"""

import torch
import torch.nn.functional as F

from .initial import DTYPES


class BackwardContext:
    """What a rule may depend on: the forward part's attributes, its input and output piece specs (local
    `shape`, `offset`, the whole tensor's `full`), which inputs want gradients, and the forward form
    (built on first use: a rule may call it, as dropout's does on the output gradient)."""

    def __init__(self, forward, build_forward):
        self.type = forward["type"]
        self.attrs = forward["attrs"]
        self.inputs = forward["inputs"]
        self.outputs = forward["outputs"]
        self.grad_inputs = list(forward["grad_inputs"])
        self.grad_outputs = list(forward["grad_outputs"])
        self.saved_inputs = bool(forward["saved_inputs"])
        self.saved_outputs = bool(forward["saved_outputs"])
        self._build_forward = build_forward
        self._forward = None

    @property
    def forward(self):
        if self._forward is None:
            self._forward = self._build_forward()
        return self._forward

    def in_shape(self, i):
        return tuple(self.inputs[i]["shape"])

    def in_dtype(self, i):
        return DTYPES[self.inputs[i]["dtype"]]


RULES = {}


def rule(*names):
    def register(builder):
        for name in names:
            RULES[name] = builder
        return builder

    return register


def _sum_to(g, shape):
    """g summed over the dimensions broadcasting added or stretched (autograd's sum_to_size)."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    return g.sum_to_size(shape) if len(shape) else g.sum()


def _for(ctx, by_input):
    """The rule's result in ctx.grad_inputs order from {input index: gradient}."""
    return tuple(by_input.get(i) for i in ctx.grad_inputs)


def _needs_inputs(ctx):
    return ctx.saved_inputs


# --- linear algebra -------------------------------------------------------------------------------------


@rule("linear")
def _linear(ctx):
    if not _needs_inputs(ctx) or len(ctx.in_shape(1)) != 2 or len(ctx.in_shape(0)) < 1:
        return None

    def run(inputs, outputs, grads):
        x, w = inputs[0], inputs[1]
        g = grads[0]
        out = {}
        if 0 in ctx.grad_inputs:
            out[0] = g.matmul(w)
        if 1 in ctx.grad_inputs:
            out[1] = g.reshape(-1, g.shape[-1]).t().mm(x.reshape(-1, x.shape[-1]))
        if 2 in ctx.grad_inputs:
            out[2] = g.reshape(-1, g.shape[-1]).sum(0)
        return _for(ctx, out)

    return run


@rule("matmul")
def _matmul(ctx):
    a_shape, b_shape = ctx.in_shape(0), ctx.in_shape(1)
    if not _needs_inputs(ctx) or len(a_shape) < 2 or len(b_shape) < 2:
        return None  # vector operands: autograd's unsqueeze bookkeeping is not worth spelling out

    def run(inputs, outputs, grads):
        a, b = inputs[0], inputs[1]
        g = grads[0]
        out = {}
        if 0 in ctx.grad_inputs:
            out[0] = _sum_to(g.matmul(b.transpose(-1, -2)), a_shape)
        if 1 in ctx.grad_inputs:
            out[1] = _sum_to(a.transpose(-1, -2).matmul(g), b_shape)
        return _for(ctx, out)

    return run


@rule("bmm")
def _bmm(ctx):
    if not _needs_inputs(ctx):
        return None

    def run(inputs, outputs, grads):
        a, b = inputs[0], inputs[1]
        g = grads[0]
        out = {}
        if 0 in ctx.grad_inputs:
            out[0] = g.bmm(b.transpose(1, 2))
        if 1 in ctx.grad_inputs:
            out[1] = a.transpose(1, 2).bmm(g)
        return _for(ctx, out)

    return run


@rule("einsum")
def _einsum(ctx):
    """Two operands, no index repeated within a term, every index of an operand found in the output or the
    other operand (no summed-away broadcast): the gradient of one operand is the einsum of the output
    gradient with the other operand into the operand's subscripts."""
    equation = ctx.attrs["equation"].replace(" ", "")
    if not _needs_inputs(ctx) or "->" not in equation or "." in equation:
        return None
    lhs, result = equation.split("->")
    terms = lhs.split(",")
    if len(terms) != 2 or any(len(set(t)) != len(t) for t in (*terms, result)):
        return None
    a, b = terms
    if any(c not in result and c not in b for c in a) or any(c not in result and c not in a for c in b):
        return None
    grad_a, grad_b = f"{result},{b}->{a}", f"{a},{result}->{b}"

    def run(inputs, outputs, grads):
        x, y = inputs[0], inputs[1]
        g = grads[0]
        out = {}
        if 0 in ctx.grad_inputs:
            out[0] = torch.einsum(grad_a, g, y)
        if 1 in ctx.grad_inputs:
            out[1] = torch.einsum(grad_b, x, g)
        return _for(ctx, out)

    return run


# --- elementwise ------------------------------------------------------------------------------------------


@rule("add", "sub")
def _add(ctx):
    sign = -1.0 if ctx.type == "sub" else 1.0

    def run(inputs, outputs, grads):
        g = grads[0]
        out = {}
        if 0 in ctx.grad_inputs:
            out[0] = _sum_to(g, ctx.in_shape(0))
        if 1 in ctx.grad_inputs:
            out[1] = _sum_to(g if sign > 0 else -g, ctx.in_shape(1))
        return _for(ctx, out)

    return run


@rule("mul")
def _mul(ctx):
    if not _needs_inputs(ctx):
        return None

    def run(inputs, outputs, grads):
        a, b = inputs[0], inputs[1]
        g = grads[0]
        out = {}
        if 0 in ctx.grad_inputs:
            out[0] = _sum_to(g * b, ctx.in_shape(0))
        if 1 in ctx.grad_inputs:
            out[1] = _sum_to(g * a, ctx.in_shape(1))
        return _for(ctx, out)

    return run


@rule("scale")
def _scale(ctx):
    factor = float(ctx.attrs["factor"])
    return lambda inputs, outputs, grads: (grads[0] * factor,)


@rule("pow")
def _pow(ctx):
    if not _needs_inputs(ctx):
        return None
    exponent = float(ctx.attrs["exponent"])
    if exponent == 0.0:
        return lambda inputs, outputs, grads: (torch.zeros_like(grads[0]),)
    # autograd's pow_backward: grad * (exponent * self.pow(exponent - 1))
    return lambda inputs, outputs, grads: (grads[0] * (exponent * inputs[0].pow(exponent - 1.0)),)


@rule("dropout")
def _dropout(ctx):
    """The output is the input times a fixed mask (by global position, placed_ops): the gradient is the
    forward form applied to the output gradient."""
    return lambda inputs, outputs, grads: (ctx.forward(grads[0])[0],)


@rule("scaled_dot_product_attention")
def _attention(ctx):
    """Plain attention (no bias, no grouped heads, causal only unsharded along the sequence: the forms
    placed_ops.attention_keeping_logsumexp serves): the fused kernel's backward from the output and log-sum-exp
    the forward kept, else (on a device without the CPU kernel, or a forward not kept) autograd over the fused
    forward, as the runtime's fallback does."""
    from . import placed_ops

    causal, scale = bool(ctx.attrs.get("causal", False)), ctx.attrs.get("scale")
    q_spec, k_spec = ctx.inputs[0], ctx.inputs[1]
    starts = [(spec.get("offset") or [0] * 4)[2] for spec in (q_spec, k_spec, ctx.outputs[0])]  # sequence
    if len(ctx.inputs) != 3 or not ctx.saved_inputs or q_spec["shape"][1] != k_spec["shape"][1] \
            or (causal and any(starts)):
        return None

    def run(inputs, outputs, grads):
        q, k, v = inputs
        kept = placed_ops.ATTENTION_SAVED.pop((id(q), id(k), id(v)), None)
        if kept is not None and kept[0] is q and kept[1] is k and kept[2] is v:
            out, logsumexp = kept[3], kept[4]
            dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                grads[0].contiguous(), q, k, v, out, logsumexp, 0.0, causal, scale=scale)
        else:
            with torch.enable_grad():
                leaves = [x.detach().requires_grad_() for x in (q, k, v)]
                out = F.scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale)
                dq, dk, dv = torch.autograd.grad(out, leaves, grads[0])
        return _for(ctx, {0: dq, 1: dk, 2: dv})

    return run


@rule("gelu")
def _gelu(ctx):
    if not _needs_inputs(ctx):
        return None
    approximate = ctx.attrs.get("approximate", "none")
    return lambda inputs, outputs, grads: (
        torch.ops.aten.gelu_backward(grads[0], inputs[0], approximate=approximate),)


@rule("tanh")
def _tanh(ctx):
    if ctx.saved_outputs:
        return lambda inputs, outputs, grads: (torch.ops.aten.tanh_backward(grads[0], outputs[0]),)
    if _needs_inputs(ctx):
        return lambda inputs, outputs, grads: (torch.ops.aten.tanh_backward(grads[0], torch.tanh(inputs[0])),)
    return None


@rule("softmax", "log_softmax")
def _softmax(ctx):
    dim = int(ctx.attrs.get("dim", -1))
    backward = torch.ops.aten._softmax_backward_data if ctx.type == "softmax" else \
        torch.ops.aten._log_softmax_backward_data
    forward = torch.softmax if ctx.type == "softmax" else torch.log_softmax

    def run(inputs, outputs, grads):
        y = outputs[0] if ctx.saved_outputs else forward(inputs[0], dim)
        return (backward(grads[0], y, dim, y.dtype),)

    return run if (ctx.saved_outputs or _needs_inputs(ctx)) else None


# --- normalization ----------------------------------------------------------------------------------------


@rule("layer_norm")
def _layer_norm(ctx):
    if not _needs_inputs(ctx):
        return None
    eps = float(ctx.attrs.get("eps", 1e-5))
    hidden = [ctx.in_shape(0)[-1]]
    n_in = len(ctx.inputs)
    mask = [i in ctx.grad_inputs for i in range(3)]

    def run(inputs, outputs, grads):
        x = inputs[0]
        w = inputs[1] if n_in > 1 else None
        b = inputs[2] if n_in > 2 else None
        _, mean, rstd = torch.ops.aten.native_layer_norm(x, hidden, w, b, eps)
        gx, gw, gb = torch.ops.aten.native_layer_norm_backward(grads[0], x, hidden, mean, rstd, w, b,
                                                                [mask[0], mask[1] and w is not None,
                                                                 mask[2] and b is not None])
        return _for(ctx, {0: gx, 1: gw, 2: gb})

    return run


@rule("rms_norm")
def _rms_norm(ctx):
    if not _needs_inputs(ctx):
        return None
    eps = float(ctx.attrs.get("eps", 1e-5))

    def run(inputs, outputs, grads):
        x, w = inputs[0], inputs[1]
        g = grads[0]
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        normed = x * rstd
        out = {}
        if 0 in ctx.grad_inputs:
            gn = g * w
            out[0] = rstd * (gn - normed * (gn * normed).mean(-1, keepdim=True))
        if 1 in ctx.grad_inputs:
            out[1] = _sum_to(g * normed, ctx.in_shape(1))
        return _for(ctx, out)

    return run


# --- embedding --------------------------------------------------------------------------------------------


@rule("embedding")
def _embedding(ctx):
    """Rows of a vocabulary shard start at its offset (placed_ops): ids outside it add nothing."""
    if not _needs_inputs(ctx) or ctx.grad_inputs != [1]:
        return None
    first = list(ctx.inputs[1].get("offset", [0, 0]))[0]
    rows, width = ctx.in_shape(1)

    def run(inputs, outputs, grads):
        ids, g = inputs[0], grads[0]
        local = ids - first
        inside = (local >= 0) & (local < rows)
        index = torch.where(inside, local, torch.zeros_like(local)).reshape(-1)
        values = (g * inside.unsqueeze(-1).to(g.dtype)).reshape(-1, width)
        return (torch.zeros((rows, width), dtype=g.dtype, device=g.device).index_add_(0, index, values),)

    return run


# --- shape and data movement (pure index ops: no saved tensor) ------------------------------------------


@rule("reshape", "view", "flatten", "squeeze", "unsqueeze", "identity", "contiguous")
def _reshape(ctx):
    shape = ctx.in_shape(0)
    return lambda inputs, outputs, grads: (grads[0].reshape(shape).contiguous(),)


@rule("transpose")
def _transpose(ctx):
    a, b = int(ctx.attrs["dim0"]), int(ctx.attrs["dim1"])
    return lambda inputs, outputs, grads: (grads[0].transpose(a, b).contiguous(),)


@rule("permute")
def _permute(ctx):
    dims = [int(d) % len(ctx.in_shape(0)) for d in ctx.attrs["dims"]]
    inverse = [0] * len(dims)
    for position, d in enumerate(dims):
        inverse[d] = position
    return lambda inputs, outputs, grads: (grads[0].permute(inverse).contiguous(),)


@rule("expand")
def _expand(ctx):
    shape = ctx.in_shape(0)
    return lambda inputs, outputs, grads: (_sum_to(grads[0], shape).contiguous(),)


@rule("chunk", "split")
def _split(ctx):
    rank = len(ctx.in_shape(0))
    dim = int(ctx.attrs.get("dim", 0)) % rank

    def run(inputs, outputs, grads):
        parts = []
        for k, spec in enumerate(ctx.outputs):
            g = grads[ctx.grad_outputs.index(k)] if k in ctx.grad_outputs else None
            parts.append(g if g is not None else
                         torch.zeros(tuple(spec["shape"]), dtype=ctx.in_dtype(0), device=grads[0].device))
        return (torch.cat(parts, dim),)

    return run


@rule("concat")
def _concat(ctx):
    dim = int(ctx.attrs.get("dim", 0))
    sizes = [ctx.in_shape(i)[dim] for i in range(len(ctx.inputs))]

    def run(inputs, outputs, grads):
        pieces = torch.split(grads[0], sizes, dim)
        return _for(ctx, {i: p.contiguous() for i, p in enumerate(pieces)})

    return run


@rule("slice")
def _slice(ctx):
    """The gradient lands where the forward form read (placed_ops._slice): output element g of the whole
    came from input element start + g * step of the whole, placed by both shards' offsets."""
    x, y = ctx.inputs[0], ctx.outputs[0]
    shape = ctx.in_shape(0)
    rank = len(shape)
    dim = int(ctx.attrs["dim"]) % rank
    n = x.get("full", x["shape"])[dim]
    start = int(ctx.attrs.get("start", 0))
    start = min(max(start + n if start < 0 else start, 0), n)
    step = int(ctx.attrs.get("step", 1))
    x_step, y_step = (x.get("step") or [1] * rank)[dim], (y.get("step") or [1] * rank)[dim]
    x_at, y_at = (x.get("offset") or [0] * rank)[dim], (y.get("offset") or [0] * rank)[dim]
    first, stride = start + y_at * step - x_at, step * y_step
    if first % x_step or stride % x_step:
        return None  # not a strided range of the input shard: autograd over the forward form
    first, stride = first // x_step, stride // x_step
    length = y["shape"][dim]
    index = [slice(None)] * rank
    index[dim] = slice(first, first + (length - 1) * stride + 1, stride)
    index = tuple(index)

    def run(inputs, outputs, grads):
        g = grads[0]
        out = torch.zeros(shape, dtype=g.dtype, device=g.device)
        out[index] = g
        return (out,)

    return run


def build(forward, build_forward):
    """The closed-form rule for a backward part whose forward part is `forward` (the manifest's
    `backward_of`), or None when the table has none for this instance."""
    builder = RULES.get(forward["type"])
    if builder is None:
        return None
    ctx = BackwardContext(forward, build_forward)
    if any(k >= len(ctx.outputs) for k in ctx.grad_outputs) or any(i >= len(ctx.inputs) for i in ctx.grad_inputs):
        return None
    if any(not spec["dtype"].startswith("f") and not spec["dtype"].startswith("bf")
           for i, spec in enumerate(ctx.inputs) if i in ctx.grad_inputs):
        return None  # an integer input's gradient: autograd's path reports it
    return builder(ctx)
