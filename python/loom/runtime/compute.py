"""Running one sub-op of a generated program: a forward part through its op form (forms/), a backward part
through its family's closed-form rule or gradient from the output where it has one, else torch.autograd
over the forward part's form (the engine's backward op reads the saved forward tensors and the output
gradients, and writes the input gradients its mirror layout names), an optimizer step on copies of its
inputs (the ExecPlan writes each buffer once); Adam(W) steps also as one batch per program (flush_adam,
deferred by the Runtime)."""

import json

import torch

from . import forms
from .forms.optimizer import adam_hyperparameters, adam_step
from .initial import DTYPES

OPTIMIZERS = {"sgd", "adam", "adamw"}


class SubOpError(RuntimeError):
    """A sub-op failed; the message names it and its op type."""


def _zeros(spec, device):
    return torch.zeros(tuple(spec["shape"]), dtype=DTYPES[spec["dtype"]], device=device)


# Forms that cost to build and are equal for a forward part and its backward part (same attributes, same
# pieces): dropout's mask, hashed from global positions for every step. Built once per step for both.
_SHARED = {"dropout"}
_SHARED_FORMS = {}
_SHARED_LIMIT = 256


def _shared_form(op_type, attrs, inputs, outputs):
    key = (op_type, json.dumps(attrs, sort_keys=True), json.dumps(inputs, sort_keys=True),
           json.dumps(outputs, sort_keys=True))
    form = _SHARED_FORMS.get(key)
    if form is None:
        if len(_SHARED_FORMS) >= _SHARED_LIMIT:  # earlier steps' masks
            _SHARED_FORMS.clear()
        form = _SHARED_FORMS[key] = forms.build_placed(op_type, attrs, inputs, outputs)
    return form


# --- Adam(W) steps batched (Runtime defers them) -----------------------------------------------------
# torch.optim runs one multi-tensor fused call over all parameters; a call per parameter costs the
# dispatch and the kernel's setup each time (8 % of a data-parallel GPT-2 step). The runtime defers the
# Adam(W) sub-ops of a program and runs them as one torch._fused_adam(w)_ call per group of equal
# hyperparameters, step, dtype and device before any other instruction (`flush_adam`): the kernel is
# element-wise per tensor, so every value is the one the per-parameter call gives.
_ADAM = {"adam", "adamw"}


def _adam_key(spec, step):
    """The hyperparameters, the step and the type of an Adam(W) sub-op: a group's key."""
    return (spec["type"], *adam_hyperparameters(spec["type"], spec["attrs"]), int(step))


def flush_adam(pending):
    """Runs the deferred Adam(W) steps, [(sub-op name, key, (weights, grad, m, v, param or None))], in place:
    one fused multi-tensor call per key; a group the fused kernel refuses runs adam_step per tensor."""
    groups = {}
    for name, key, operands in pending:
        groups.setdefault(key, []).append((name, operands))
    for (kind, lr, beta1, beta2, eps, decay, step, _, device), members in groups.items():
        weights, grads, ms, vs, params = (list(column) for column in zip(*(o for _, o in members)))
        step_t = torch.full((), float(step), dtype=torch.float32, device=device)  # read, not advanced
        fused = torch._fused_adamw_ if kind == "adamw" else torch._fused_adam_
        try:
            try:
                fused(weights, grads, ms, vs, [], [step_t] * len(weights), lr=lr, beta1=beta1, beta2=beta2,
                      weight_decay=decay, eps=eps, amsgrad=False, maximize=False)
            except (RuntimeError, NotImplementedError):
                for w, g, m, v in zip(weights, grads, ms, vs):
                    adam_step(w, g, m, v, lr, beta1, beta2, eps, decay, kind == "adamw", step)
            for param, w in zip(params, weights):
                if param is not None:  # fp32 master weights: the 16-bit parameter follows
                    param.copy_(w)
        except (RuntimeError, ValueError, TypeError) as e:
            raise SubOpError(f"sub-ops {[n for n, _ in members]} ({kind}, batched): {e}") from e


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
        self.rule = None
        self.fn = None
        from_output = bool(forward) and source["type"] in forms.FROM_OUTPUT and not forward["saved_inputs"]
        if forward and not from_output:
            self.rule = forms.build_backward(forward, self._build_form)
        if forward and not forward["saved_inputs"] and forward["saved_outputs"] and not from_output \
                and self.rule is None:
            raise SubOpError(f"sub-op '{self.name}': the backward of '{source['type']}' saves only its outputs, and "
                             f"the runtime has no gradient from outputs for it")
        if self.rule is None and not from_output:
            self.fn = self._build_form()
        shape_only = set(spec.get("shape_only", []))
        self._zero_inputs = [i for i, _ in enumerate(spec["inputs"]) if i in shape_only]

    def _build_form(self):
        source = self.forward or self.spec
        attrs = {**source["attrs"], "step": self.step} if source["type"] == "dropout" else source["attrs"]
        try:
            if source["type"] in _SHARED:
                return _shared_form(source["type"], attrs, source["inputs"], source["outputs"])
            return forms.build_placed(source["type"], attrs, source["inputs"], source["outputs"])
        except forms.Unsupported as e:
            raise SubOpError(f"sub-op '{self.name}' ({source['type']}): {e}") from None

    def set_step(self, step):
        """The training step's number (1 for the first): Adam's bias correction and dropout's mask (forward
        and backward alike) depend on it."""
        if step == self.step:
            return
        if self.forward is None and self.spec["type"] in OPTIMIZERS:
            self.step = step
            spec = self.spec
            self.fn = forms.build_placed(spec["type"], {**spec["attrs"], "step": step}, spec["inputs"], spec["outputs"])
        elif (self.forward or self.spec)["type"] == "dropout":
            self.step = step
            if self.rule is not None:
                self.rule = forms.build_backward(self.forward, self._build_form)
            else:
                self.fn = self._build_form()

    @property
    def batchable(self):
        """An Adam(W) step the runtime may defer and batch (flush_adam)."""
        return self.forward is None and self.spec["type"] in _ADAM and not self._zero_inputs

    def start_adam(self, args, writable=frozenset()):
        """A deferred Adam(W) step: its outputs (the parameter and states as the step writes them, filled by
        flush_adam: copies, but the `writable` inputs themselves) and its entry of the batch."""
        if None in args:
            raise SubOpError(f"sub-op '{self.name}': an input of the optimizer step is missing (None)")
        param, grad, *rest = [x if i == 1 or i in writable else x.clone(memory_format=torch.contiguous_format)
                               for i, x in enumerate(args)]
        master = bool(self.spec["attrs"].get("master_weights", False))
        weights = rest[0] if master else param
        g = grad.to(weights.dtype) if grad.dtype != weights.dtype else grad
        key = (*_adam_key(self.spec, self.step), weights.dtype, weights.device)
        return (param, *rest), (self.name, key, (weights, g, rest[-2], rest[-1], param if master else None))

    def __call__(self, *args, writable=frozenset()):
        try:
            return self._backward(args) if self.forward else self._forward(args, writable)
        except SubOpError:
            raise
        except (RuntimeError, ValueError, TypeError, IndexError) as e:
            raise SubOpError(f"sub-op '{self.name}' ({(self.forward or self.spec)['type']}): {e}") from e

    def _forward(self, args, writable=frozenset()):
        spec = self.spec
        inputs = list(args)
        for i in self._zero_inputs:
            inputs[i] = None
        if None in inputs:
            inputs = [_zeros(s, self.device) if a is None else a for a, s in zip(inputs, spec["inputs"])]
        if spec["type"] in OPTIMIZERS:  # updated in place: copies, but of the gradient (input 1), which no step
            inputs = [x if i == 1 or i in writable else x.clone() for i, x in enumerate(inputs)]  # writes
        with torch.no_grad():
            outputs = forms.as_tuple(self.fn(*inputs))
        return tuple(o.contiguous() for o in outputs)

    def _backward(self, args):
        fw = self.forward
        n_in, n_out = len(fw["inputs"]), len(fw["outputs"])
        pos = 0
        if fw["saved_inputs"]:
            inputs, pos = list(args[:n_in]), n_in
        elif self.rule is not None:
            inputs = None
        else:
            inputs = [_zeros(s, self.device) for s in fw["inputs"]]
        outputs = None
        if fw["saved_outputs"]:
            outputs, pos = list(args[pos:pos + n_out]), pos + n_out
        grads = list(args[pos:])
        if len(grads) != len(fw["grad_outputs"]):
            raise SubOpError(f"sub-op '{self.name}': {len(grads)} output gradients for grad_outputs {fw['grad_outputs']}")
        if self.rule is not None:
            return self._closed_form(inputs if fw["saved_inputs"] else None, outputs, grads)
        if self.fn is None:
            rule = forms.FROM_OUTPUT[fw["type"]]
            y, g = outputs[fw["grad_outputs"][0]], grads[0]
            return (rule(fw["attrs"], y, g if g.dtype == y.dtype else g.to(y.dtype)).contiguous(),)
        leaves = []
        for i in fw["grad_inputs"]:
            if not inputs[i].is_floating_point():
                raise SubOpError(f"sub-op '{self.name}': gradient of integer input {i}")
            inputs[i] = inputs[i].detach().requires_grad_(True)
            leaves.append(inputs[i])
        with torch.enable_grad():
            produced = forms.as_tuple(self.fn(*inputs))
        selected = [produced[k] for k in fw["grad_outputs"]]
        pairs = [(o, g) for o, g in zip(selected, grads) if o.requires_grad]
        if not pairs:
            return tuple(torch.zeros_like(x) for x in leaves)
        result = torch.autograd.grad([o for o, _ in pairs], leaves, [g.to(o.dtype) for o, g in pairs],
                                     allow_unused=True)
        return tuple((torch.zeros_like(x) if r is None else r).detach().contiguous() for r, x in zip(result, leaves))

    def _closed_form(self, inputs, outputs, grads):
        """The backward part through its closed-form rule: gradients in the forward inputs' dtypes, zeros
        for an input the rule leaves untouched (no path from the output gradients)."""
        fw = self.forward
        grads = [g if g is None else g.to(DTYPES[fw["outputs"][k]["dtype"]])
                 for g, k in zip(grads, fw["grad_outputs"])]
        result = self.rule(inputs, outputs, grads)
        out = []
        for r, i in zip(result, fw["grad_inputs"]):
            want = DTYPES[fw["inputs"][i]["dtype"]]
            out.append(_zeros(fw["inputs"][i], self.device) if r is None else
                       (r if r.dtype == want else r.to(want)).contiguous())
        return tuple(out)
