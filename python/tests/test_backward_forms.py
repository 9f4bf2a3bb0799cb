"""Every closed-form backward rule (the families' BACKWARD tables, loom/runtime/forms/) against autograd over
the same forward form, through the runtime's own SubOp (the contract compute.py keeps: saved tensors and
output gradients in, the mirror layout's input gradients out), over random shapes."""

import random
import zlib

import pytest
import torch

from loom.runtime import forms
from loom.runtime.compute import SubOp

CASES_PER_RULE = 6


def spec(shape, dtype="f32", offset=None, full=None):
    shape = list(shape)
    return {"shape": shape, "dtype": dtype, "offset": list(offset or [0] * len(shape)),
            "full": list(full or shape), "step": [1] * len(shape)}


def backward_spec(op_type, attrs, inputs, outputs, grad_inputs, grad_outputs=(0,), saved_inputs=True,
                  saved_outputs=False):
    forward = {"type": op_type, "attrs": attrs, "inputs": inputs, "outputs": outputs,
               "grad_inputs": list(grad_inputs), "grad_outputs": list(grad_outputs),
               "saved_inputs": saved_inputs, "saved_outputs": saved_outputs}
    return {"name": f"{op_type}.backward", "type": op_type, "attrs": attrs, "backward_of": forward,
            "inputs": [], "outputs": [inputs[i] for i in grad_inputs]}


def _value(s, rng, high=None):
    shape = tuple(s["shape"])
    if s["dtype"] == "i64":
        return torch.randint(0, high, shape, generator=rng)
    return torch.randn(shape, generator=rng, dtype=torch.float64).float()


def check(op_type, attrs, inputs, outputs, grad_inputs, rng, grad_outputs=(0,), saved_outputs=False, high=None,
          saved_inputs=True, positive=False):
    bw = backward_spec(op_type, attrs, inputs, outputs, grad_inputs, grad_outputs, saved_inputs, saved_outputs)
    closed = SubOp(bw, "cpu")
    assert closed.rule is not None, f"{op_type} {attrs}: no closed form"
    reference = SubOp(bw, "cpu", closed_form=False)
    values = [_value(s, rng, high) for s in inputs]
    if positive:
        values = [v.abs() + 0.5 if v.is_floating_point() else v for v in values]
    form = reference.fn
    with torch.no_grad():
        produced = form(*values)
    args = list(values) if saved_inputs else []
    if saved_outputs:
        args += [o.contiguous() for o in produced]
    args += [_value(outputs[k], rng) for k in grad_outputs]
    got = closed(*args)
    want = reference(*args)  # without saved inputs autograd runs over zeros, as compute.py always did
    assert len(got) == len(want) == len(grad_inputs)
    for g, w, i in zip(got, want, grad_inputs):
        assert g.shape == w.shape and g.dtype == w.dtype, (op_type, i, g.shape, w.shape)
        torch.testing.assert_close(g, w, rtol=2e-5, atol=2e-6, msg=lambda m: f"{op_type} {attrs} input {i}: {m}")


def shapes(rng, rank, low=1, high=6):
    return [int(torch.randint(low, high + 1, (1,), generator=rng)) for _ in range(rank)]


def subsets(rng, n):
    chosen = [i for i in range(n) if torch.rand(1, generator=rng) < 0.7]
    return chosen or [int(torch.randint(0, n, (1,), generator=rng))]


def _linear(rng):
    lead = shapes(rng, int(torch.randint(1, 4, (1,), generator=rng)))
    k, n = shapes(rng, 2, 1, 9)
    bias = bool(torch.rand(1, generator=rng) < 0.5)
    ins = [spec([*lead, k]), spec([n, k])] + ([spec([n])] if bias else [])
    check("linear", {}, ins, [spec([*lead, n])], subsets(rng, len(ins)), rng)


def _matmul(rng):
    m, k, n = shapes(rng, 3, 1, 9)
    batch = shapes(rng, int(torch.randint(0, 3, (1,), generator=rng)))
    b_batch = [1 if torch.rand(1, generator=rng) < 0.3 else d for d in batch][len(batch) // 2:]
    out_batch = list(batch)
    check("matmul", {}, [spec([*batch, m, k]), spec([*b_batch, k, n])], [spec([*out_batch, m, n])],
          subsets(rng, 2), rng)


def _bmm(rng):
    b, m, k, n = shapes(rng, 4)
    check("bmm", {}, [spec([b, m, k]), spec([b, k, n])], [spec([b, m, n])], subsets(rng, 2), rng)


def _einsum(rng):
    a, k, p, n = shapes(rng, 4)
    check("einsum", {"equation": "ak,kpn->apn"}, [spec([a, k]), spec([k, p, n])], [spec([a, p, n])],
          subsets(rng, 2), rng)
    b, h, q, d = shapes(rng, 4)
    check("einsum", {"equation": "bhqd,bhkd->bhqk"}, [spec([b, h, q, d]), spec([b, h, k, d])],
          [spec([b, h, q, k])], subsets(rng, 2), rng)


def _broadcast_pair(rng):
    out = shapes(rng, int(torch.randint(1, 4, (1,), generator=rng)))
    other = [1 if torch.rand(1, generator=rng) < 0.4 else d for d in out]
    other = other[int(torch.randint(0, len(other), (1,), generator=rng)):] if torch.rand(1, generator=rng) < 0.5 \
        else other
    return (out, other) if torch.rand(1, generator=rng) < 0.5 else (other, out), out


def _elementwise(rng):
    for op_type in ("add", "sub", "mul"):
        (a, b), out = _broadcast_pair(rng)
        broadcast = torch.broadcast_shapes(tuple(a), tuple(b))
        check(op_type, {}, [spec(a), spec(b)], [spec(list(broadcast))], subsets(rng, 2), rng,
              saved_inputs=op_type == "mul")


def _unary(rng):
    shape = shapes(rng, int(torch.randint(1, 4, (1,), generator=rng)))
    check("scale", {"factor": float(torch.randn(1, generator=rng))}, [spec(shape)], [spec(shape)], [0], rng,
          saved_inputs=False)
    check("pow", {"exponent": random.Random(int(torch.randint(0, 99, (1,), generator=rng))).choice([2.0, 3.0, 0.5])},
          [spec(shape)], [spec(shape)], [0], rng, positive=True)
    check("gelu", {"approximate": "tanh"}, [spec(shape)], [spec(shape)], [0], rng)
    check("gelu", {}, [spec(shape)], [spec(shape)], [0], rng)
    check("tanh", {}, [spec(shape)], [spec(shape)], [0], rng)
    for op_type in ("softmax", "log_softmax"):
        check(op_type, {"dim": -1}, [spec(shape)], [spec(shape)], [0], rng)
    full = [d * 2 for d in shape]
    check("dropout", {"p": 0.3, "seed": 7}, [spec(shape, offset=[d for d in shape], full=full)],
          [spec(shape, offset=[d for d in shape], full=full)], [0], rng)


def _norms(rng):
    lead = shapes(rng, int(torch.randint(1, 3, (1,), generator=rng)))
    h = shapes(rng, 1, 2, 12)[0]
    bias = bool(torch.rand(1, generator=rng) < 0.7)
    ins = [spec([*lead, h]), spec([h])] + ([spec([h])] if bias else [])
    check("layer_norm", {"eps": 1e-5}, ins, [spec([*lead, h])], subsets(rng, len(ins)), rng)
    check("rms_norm", {"eps": 1e-6}, [spec([*lead, h]), spec([h])], [spec([*lead, h])], subsets(rng, 2), rng)


def _embedding(rng):
    b, s = shapes(rng, 2)
    rows, width = shapes(rng, 2, 2, 9)
    first = int(torch.randint(0, rows, (1,), generator=rng))  # a vocabulary shard at an offset
    ins = [spec([b, s], "i64"), spec([rows, width], offset=[first, 0], full=[first + rows * 2, width])]
    check("embedding", {}, ins, [spec([b, s, width])], [1], rng, high=first + rows * 2)


def _shape_ops(rng):
    a, b, c = shapes(rng, 3)
    for op_type in ("identity", "contiguous"):
        check(op_type, {}, [spec([a, b, c])], [spec([a, b, c])], [0], rng, saved_inputs=False)
    for op_type in ("view", "reshape", "flatten"):
        check(op_type, {}, [spec([a, b, c])], [spec([a * b, c])], [0], rng, saved_inputs=False)
    check("squeeze", {"dim": 1}, [spec([a, 1, c])], [spec([a, c])], [0], rng, saved_inputs=False)
    check("unsqueeze", {"dim": 0}, [spec([a, c])], [spec([1, a, c])], [0], rng, saved_inputs=False)
    check("transpose", {"dim0": 0, "dim1": 2}, [spec([a, b, c])], [spec([c, b, a])], [0], rng, saved_inputs=False)
    dims = [2, 0, 1]
    check("permute", {"dims": dims}, [spec([a, b, c])], [spec([c, a, b])], [0], rng, saved_inputs=False)
    check("expand", {}, [spec([a, 1, c])], [spec([a, b, c])], [0], rng, saved_inputs=False)
    check("split", {"dim": 1, "sizes": [1, 1, 1]}, [spec([a, 3, c])], [spec([a, 1, c])] * 3, [0], rng,
          grad_outputs=[0, 1, 2], saved_inputs=False)
    check("chunk", {"dim": 1}, [spec([a, 2 * b, c])], [spec([a, b, c])] * 2, [0], rng, grad_outputs=[1],
          saved_inputs=False)
    check("concat", {"dim": 1}, [spec([a, b, c]), spec([a, 2, c])], [spec([a, b + 2, c])], subsets(rng, 2), rng,
          saved_inputs=False)
    check("slice", {"dim": 1, "start": 0, "end": b, "step": 1}, [spec([a, b + 1, c])], [spec([a, b, c])], [0], rng,
          saved_inputs=False)
    # A start past 0 (rotate_half's second half) and a shard of the output: the gradient lands where read.
    check("slice", {"dim": 1, "start": 1, "end": 2 * b + 1, "step": 2}, [spec([a, 2 * b + 1, c])], [spec([a, b, c])],
          [0], rng, saved_inputs=False)
    check("slice", {"dim": 1, "start": 2, "end": 2 + 2 * b, "step": 1}, [spec([a, 2 * b + 2, c])],
          [spec([a, b, c], offset=[0, b, 0], full=[a, 2 * b, c])], [0], rng, saved_inputs=False)


def _attention(rng):
    """The fused CPU kernel's backward from what the forward kept (forms.attention.ATTENTION_SAVED): check() runs the
    forward form first, as a program does."""
    b, h, s, d = shapes(rng, 4, 1, 9)
    causal = bool(torch.rand(1, generator=rng) < 0.5)
    t = s if causal else shapes(rng, 1, 1, 9)[0]
    attrs = {"causal": causal, "scale": float(torch.rand(1, generator=rng)) + 0.1}
    # Values as wide as the heads, or of another width (multi-head latent attention: DeepSeek V3's values are
    # narrower than its queries and keys, which the CPU flash kernel refuses).
    e = d if torch.rand(1, generator=rng) < 0.5 else shapes(rng, 1, 1, 9)[0]
    # A batch shard (offset along the batch, as a data-parallel rank's) keeps the plain form.
    q = spec([b, h, s, d], offset=[b, 0, 0, 0], full=[2 * b, h, s, d])
    k = spec([b, h, t, d], offset=[b, 0, 0, 0], full=[2 * b, h, t, d])
    v = spec([b, h, t, e], offset=[b, 0, 0, 0], full=[2 * b, h, t, e])
    check("scaled_dot_product_attention", attrs, [q, k, v], [spec([b, h, s, e], offset=[b, 0, 0, 0],
          full=[2 * b, h, s, e])], subsets(rng, 3), rng)


PROPERTIES = [_linear, _matmul, _bmm, _einsum, _elementwise, _unary, _norms, _embedding, _shape_ops, _attention]


@pytest.mark.parametrize("prop", PROPERTIES, ids=lambda p: p.__name__.strip("_"))
def test_closed_form_backward_equals_autograd(prop):
    rng = torch.Generator().manual_seed(zlib.crc32(prop.__name__.encode()))  # str hash() differs per process
    for _ in range(CASES_PER_RULE):
        prop(rng)


def test_every_rule_is_covered():
    """Each op type of the table is exercised by a property above (a new rule needs its property)."""
    import inspect
    source = inspect.getsource(inspect.getmodule(test_every_rule_is_covered))
    missing = [t for t in forms.BACKWARD if f'"{t}"' not in source]
    assert not missing, f"rules without a property test: {missing}"


def test_attention_backward_without_a_kept_forward_runs_autograd():
    """A backward whose forward did not keep its log-sum-exp (another device, a recomputed forward) still gives
    autograd's gradients."""
    from loom.runtime.forms.attention import ATTENTION_SAVED

    rng = torch.Generator().manual_seed(3)
    ins = [spec([2, 3, 5, 4]) for _ in range(3)]
    bw = backward_spec("scaled_dot_product_attention", {"causal": True}, ins, [spec([2, 3, 5, 4])], [0, 1, 2])
    closed = SubOp(bw, "cpu")
    assert closed.rule is not None
    q, k, v, g = (_value(ins[0], rng) for _ in range(4))
    ATTENTION_SAVED.clear()
    got = closed(q, k, v, g)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    want = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=True), leaves, g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


FROM_OUTPUT_CASES = [("relu", {}), ("exp", {}), ("sqrt", {}), ("rsqrt", {}), ("tanh", {}), ("sigmoid", {}),
                     ("softmax", {"dim": -1}), ("log_softmax", {"dim": 1}), ("reciprocal", {})]


def test_every_gradient_from_output_is_covered():
    assert sorted(t for t, _ in FROM_OUTPUT_CASES) == sorted(forms.FROM_OUTPUT)


@pytest.mark.parametrize("op_type, attrs", FROM_OUTPUT_CASES)
def test_gradients_from_saved_outputs_equal_autograd(op_type, attrs):
    """Ops whose backward reads only their output (the families' FROM_OUTPUT, torch's fused backward kernels
    where it has them) against autograd over the forward, over random shapes."""
    rng = torch.Generator().manual_seed(len(op_type))
    for _ in range(CASES_PER_RULE):
        shape = shapes(rng, int(torch.randint(2, 4, (1,), generator=rng)))
        bw = backward_spec(op_type, attrs, [spec(shape)], [spec(shape)], [0], saved_inputs=False, saved_outputs=True)
        op = SubOp(bw, "cpu")
        x = torch.randn(shape, generator=rng, dtype=torch.float64).float()
        if op_type in ("sqrt", "rsqrt", "reciprocal"):
            x = x.abs() + 0.5
        leaf = x.clone().requires_grad_()
        y = SubOp({**bw["backward_of"], "name": "forward"}, "cpu")._forward([leaf.detach()])[0]
        g = torch.randn(shape, generator=rng)
        want = torch.autograd.grad(getattr(torch, op_type)(leaf, **attrs), leaf, g)[0]
        got = op(y, g)[0]
        torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-6, msg=lambda m: f"{op_type}: {m}")
