"""Running one sub-op of a generated program: a forward part through its op form, a backward part through
torch.autograd over the forward part's form (the engine's backward op reads the saved forward tensors and
the output gradients, and writes the input gradients its mirror layout names), an optimizer step on copies
of its inputs (the ExecPlan writes each buffer once)."""

import torch

from . import ops, placed_ops
from .initial import DTYPES

OPTIMIZERS = {"sgd", "adam", "adamw"}


class SubOpError(RuntimeError):
    """A sub-op failed; the message names it and its op type."""


def _zeros(spec, device):
    return torch.zeros(tuple(spec["shape"]), dtype=DTYPES[spec["dtype"]], device=device)


# Backward of ops that save only their outputs: the gradient from the output y and the output gradient g.
_FROM_OUTPUT = {
    "relu": lambda attrs, y, g: g * (y > 0).to(g.dtype),
    "exp": lambda attrs, y, g: g * y,
    "sqrt": lambda attrs, y, g: g / (2 * y),
    "rsqrt": lambda attrs, y, g: -0.5 * g * y ** 3,
    "tanh": lambda attrs, y, g: g * (1 - y * y),
    "sigmoid": lambda attrs, y, g: g * y * (1 - y),
    "softmax": lambda attrs, y, g: y * (g - (g * y).sum(int(attrs.get("dim", -1)), keepdim=True)),
    "log_softmax": lambda attrs, y, g: g - torch.exp(y) * g.sum(int(attrs.get("dim", -1)), keepdim=True),
}


class SubOp:
    """One sub-op's spec from the manifest, its form built once."""

    def __init__(self, spec, device):
        self.spec = spec
        self.device = device
        self.name = spec["name"]
        forward = spec.get("backward_of")
        self.forward = forward
        self.step = 1
        source = forward or spec
        if forward and not forward["saved_inputs"] and forward["saved_outputs"] and source["type"] not in _FROM_OUTPUT:
            raise SubOpError(f"sub-op '{self.name}': the backward of '{source['type']}' saves only its outputs, and "
                             f"the runtime has no gradient from outputs for it")
        try:
            self.fn = None if forward and source["type"] in _FROM_OUTPUT and not forward["saved_inputs"] else \
                placed_ops.build(source["type"], source["attrs"], source["inputs"], source["outputs"])
        except ops.Unsupported as e:
            raise SubOpError(f"sub-op '{self.name}' ({source['type']}): {e}") from None

    def set_step(self, step):
        """The optimizer's step number (1 for the first): Adam's bias correction depends on it."""
        if self.forward or self.spec["type"] not in OPTIMIZERS or step == self.step:
            return
        self.step = step
        spec = self.spec
        self.fn = placed_ops.build(spec["type"], {**spec["attrs"], "step": step}, spec["inputs"], spec["outputs"])

    def __call__(self, *args):
        try:
            return self._backward(args) if self.forward else self._forward(args)
        except SubOpError:
            raise
        except (RuntimeError, ValueError, TypeError, IndexError) as e:
            raise SubOpError(f"sub-op '{self.name}' ({(self.forward or self.spec)['type']}): {e}") from e

    def _forward(self, args):
        spec = self.spec
        shape_only = set(spec.get("shape_only", []))
        inputs = [_zeros(s, self.device) if (a is None or i in shape_only) else a
                  for i, (a, s) in enumerate(zip(args, spec["inputs"]))]
        if spec["type"] in OPTIMIZERS:
            inputs = [x.clone() for x in inputs]
        with torch.no_grad():
            outputs = ops.as_tuple(self.fn(*inputs))
        return tuple(o.contiguous() for o in outputs)

    def _backward(self, args):
        fw = self.forward
        n_in, n_out = len(fw["inputs"]), len(fw["outputs"])
        pos = 0
        if fw["saved_inputs"]:
            inputs, pos = list(args[:n_in]), n_in
        else:
            inputs = [_zeros(s, self.device) for s in fw["inputs"]]
        outputs = None
        if fw["saved_outputs"]:
            outputs, pos = list(args[pos:pos + n_out]), pos + n_out
        grads = list(args[pos:])
        if len(grads) != len(fw["grad_outputs"]):
            raise SubOpError(f"sub-op '{self.name}': {len(grads)} output gradients for grad_outputs {fw['grad_outputs']}")
        if self.fn is None:
            rule = _FROM_OUTPUT[fw["type"]]
            return (rule(fw["attrs"], outputs[fw["grad_outputs"][0]], grads[0]).contiguous(),)
        leaves = []
        for i in fw["grad_inputs"]:
            if not inputs[i].is_floating_point():
                raise SubOpError(f"sub-op '{self.name}': gradient of integer input {i}")
            inputs[i] = inputs[i].detach().requires_grad_(True)
            leaves.append(inputs[i])
        with torch.enable_grad():
            produced = ops.as_tuple(self.fn(*inputs))
        selected = [produced[k] for k in fw["grad_outputs"]]
        pairs = [(o, g) for o, g in zip(selected, grads) if o.requires_grad]
        if not pairs:
            return tuple(torch.zeros_like(x) for x in leaves)
        result = torch.autograd.grad([o for o, _ in pairs], leaves, [g.to(o.dtype) for o, g in pairs],
                                     allow_unused=True)
        return tuple((torch.zeros_like(x) if r is None else r).detach().contiguous() for r, x in zip(result, leaves))
