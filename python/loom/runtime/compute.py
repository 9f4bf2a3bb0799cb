"""Running one sub-op of a generated program: a forward part through its op form (forms/), a backward part
through its family's closed-form rule or gradient from the output where it has one, else torch.autograd
over the forward part's form (the engine's backward op reads the saved forward tensors and the output
gradients, and writes the input gradients its mirror layout names), an optimizer step on copies of its
inputs (the ExecPlan writes each buffer once); Adam(W) steps also as one batch per program (flush_adam,
deferred by the Runtime).

The hot path: a step runs every sub-op of the program once (hundreds of calls), so each SubOp decides at
construction which path it takes (`run`: the plain forward, the forward with zero inputs, an optimizer step,
the closed-form backward, the gradient from the output, autograd) and the call does only that path's work.
Results are what the form returns, views included (a transpose, a split): no reader needs a contiguous
buffer but the collectives (comm.py copies at that boundary) and in-place optimizer steps (inputs copied
unless donated, and donated only when contiguous: runtime.py)."""

import json

import torch

from . import forms
from .forms.optimizer import adam_hyperparameters, adam_step
from .initial import DTYPES

OPTIMIZERS = {"sgd", "adam", "adamw"}
_NONE_WRITABLE = frozenset()
_grad_enabled, _set_grad_enabled = torch.is_grad_enabled, torch._C._set_grad_enabled


class SubOpError(RuntimeError):
    """A sub-op failed; the message names it and its op type."""


def _zeros(spec, device):
    return torch.zeros(tuple(spec["shape"]), dtype=DTYPES[spec["dtype"]], device=device)


# Forms that cost to build and are equal for a forward part and its backward part (same attributes, same
# pieces): dropout's mask, hashed from global positions for every step. Built once per step for both.
_SHARED = {"dropout"}
_SHARED_FORMS = {}
_SHARED_LIMIT = 256


def _shared_key(source):
    """What a shared form depends on but the step: the forward part's type, attributes and pieces."""
    return (source["type"], json.dumps(source["attrs"], sort_keys=True), json.dumps(source["inputs"], sort_keys=True),
            json.dumps(source["outputs"], sort_keys=True))


def _shared_form(key, step, op_type, attrs, inputs, outputs):
    form = _SHARED_FORMS.get((key, step))
    if form is None:
        if len(_SHARED_FORMS) >= _SHARED_LIMIT:  # earlier steps' masks
            _SHARED_FORMS.clear()
        form = _SHARED_FORMS[(key, step)] = forms.build_placed(op_type, attrs, inputs, outputs)
    return form


# --- Adam(W) steps batched (Runtime defers them) -----------------------------------------------------
# torch.optim runs one multi-tensor fused call over all parameters; a call per parameter costs the
# dispatch and the kernel's setup each time (8 % of a data-parallel GPT-2 step). The runtime defers the
# Adam(W) sub-ops of a program and runs them as one torch._fused_adam(w)_ call per group of equal
# hyperparameters, step, dtype and device before any other instruction (`flush_adam`): the kernel is
# element-wise per tensor, so every value is the one the per-parameter call gives.
_ADAM = {"adam", "adamw"}


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
    """One sub-op's spec from the manifest, its form built once and its path chosen once (`run`)."""

    def __init__(self, spec, device, closed_form=True):
        """closed_form=False: a backward part runs autograd over its forward form even where its family has a
        closed-form rule or a gradient from the output (the reference python/tests/test_backward_forms.py
        checks them against)."""
        self.spec = spec
        self.device = device
        self.name = spec["name"]
        forward = spec.get("backward_of")
        self.forward = forward
        self.step = 1
        source = forward or spec
        self.type = source["type"]
        self.rule = None
        self.fn = None
        self._shared = _shared_key(source) if source["type"] in _SHARED else None
        from_output = bool(forward) and source["type"] in forms.FROM_OUTPUT and not forward["saved_inputs"] \
            and closed_form
        if forward and not from_output and closed_form:
            self.rule = forms.build_backward(forward, self._build_form)
        if forward and not forward["saved_inputs"] and forward["saved_outputs"] and not from_output \
                and self.rule is None and closed_form:
            raise SubOpError(f"sub-op '{self.name}': the backward of '{source['type']}' saves only its outputs, and "
                             f"the runtime has no gradient from outputs for it")
        if self.rule is None and not from_output:
            self.fn = self._build_form()
        shape_only = set(spec.get("shape_only", []))
        self._zero_inputs = [i for i, _ in enumerate(spec["inputs"]) if i in shape_only]
        optimizer = forward is None and spec["type"] in OPTIMIZERS
        # Its results depend on the step (Adam's bias correction, dropout's mask): set_step follows it.
        self.stepped = optimizer or source["type"] == "dropout"
        # An Adam(W) step the runtime may defer and batch (flush_adam).
        self.batchable = optimizer and spec["type"] in _ADAM and not self._zero_inputs
        if optimizer:
            self._adam = (spec["type"], *adam_hyperparameters(spec["type"], spec["attrs"])) \
                if spec["type"] in _ADAM else None  # the type and hyperparameters of its batch's key
            self._master = bool(spec["attrs"].get("master_weights", False))
            self._fn_step = 1  # the step its form was built for
        if forward is None:
            self._path = self._optimizer if optimizer else \
                self._forward_with_zeros if self._zero_inputs else self._forward
        else:
            self._grad_dtypes = [DTYPES[forward["outputs"][k]["dtype"]] for k in forward["grad_outputs"]]
            self._input_dtypes = [DTYPES[forward["inputs"][i]["dtype"]] for i in forward["grad_inputs"]]
            self._path = self._closed_form if self.rule is not None else \
                self._from_output if self.fn is None else self._autograd

    def _build_form(self):
        source = self.forward or self.spec
        attrs = {**source["attrs"], "step": self.step} if source["type"] == "dropout" else source["attrs"]
        try:
            if self._shared is not None:
                return _shared_form(self._shared, self.step, source["type"], attrs, source["inputs"],
                                    source["outputs"])
            return forms.build_placed(source["type"], attrs, source["inputs"], source["outputs"])
        except forms.Unsupported as e:
            raise SubOpError(f"sub-op '{self.name}' ({source['type']}): {e}") from None

    def set_step(self, step):
        """The training step's number (1 for the first): Adam's bias correction and dropout's mask (forward
        and backward alike) depend on it."""
        if step == self.step or not self.stepped:
            return
        self.step = step
        if self.forward is None and self.spec["type"] in OPTIMIZERS:
            return  # its form is rebuilt where it runs (_optimizer); a batched step never runs it (start_adam)
        if self.rule is not None:
            self.rule = forms.build_backward(self.forward, self._build_form)
        else:
            self.fn = self._build_form()

    def start_adam(self, args, writable=frozenset()):
        """A deferred Adam(W) step: its outputs (the parameter and states as the step writes them, filled by
        flush_adam: copies, but the `writable` inputs themselves) and its entry of the batch."""
        args, writable = self._offloaded_param(args, writable)
        if any(x is None for x in args):
            raise SubOpError(f"sub-op '{self.name}': an input of the optimizer step is missing (None)")
        param, grad, *rest = [x if i == 1 or i in writable else x.clone(memory_format=torch.contiguous_format)
                              for i, x in enumerate(args)]
        weights = rest[0] if self._master else param
        g = grad.to(weights.dtype) if grad.dtype != weights.dtype else grad
        key = (*self._adam, self.step, weights.dtype, weights.device)  # a group's key (flush_adam)
        return (param, *rest), (self.name, key, (weights, g, rest[-2], rest[-1], param if self._master else None))

    def __call__(self, *args, writable=frozenset()):
        return self.run(args, writable)

    def run(self, args, writable=_NONE_WRITABLE):
        """The sub-op over `args` (a tuple of tensors) along the path chosen at construction; errors name it."""
        try:
            return self._path(args, writable)
        except SubOpError:
            raise
        except (RuntimeError, ValueError, TypeError, IndexError) as e:
            raise SubOpError(f"sub-op '{self.name}' ({self.type}): {e}") from e

    # --- forward paths ------------------------------------------------------------------------------

    def _forward(self, args, writable=_NONE_WRITABLE):
        """Every input given, nothing written: the form under no_grad (no graph, and the attention form keeps
        its log-sum-exp for the backward only then)."""
        if _grad_enabled():
            _set_grad_enabled(False)
            try:
                outputs = self.fn(*args)
            finally:
                _set_grad_enabled(True)
        else:
            outputs = self.fn(*args)
        return outputs if type(outputs) is tuple else forms.as_tuple(outputs)

    def _with_zeros(self, args):
        """The arguments with zeros of their spec for the shape-only inputs (the engine passes None)."""
        inputs = list(args)
        for i in self._zero_inputs:
            inputs[i] = None
        return [_zeros(s, self.device) if a is None else a for a, s in zip(inputs, self.spec["inputs"])]

    def _forward_with_zeros(self, args, writable):
        return self._forward(self._with_zeros(args), writable)

    def _offloaded_param(self, args, writable):
        """An offloaded step with fp32 master weights reads no 16-bit parameter (None, exec_plan.h): a fresh
        one on the host, where the master copy is, for it to write."""
        if args[0] is not None or not self._master:
            return args, writable
        out = self.spec["outputs"][0]
        param = torch.empty(out["shape"], dtype=DTYPES[out["dtype"]], device=args[2].device)
        return (param, *args[1:]), writable | {0}

    def _optimizer(self, args, writable):
        """Updated in place: copies of the inputs, but of the gradient (input 1, which no step writes) and of
        the `writable` ones (donated)."""
        args, writable = self._offloaded_param(args, writable)
        inputs = [x if i == 1 or i in writable else x.clone(memory_format=torch.contiguous_format)
                  for i, x in enumerate(self._with_zeros(args))]
        if self._fn_step != self.step:
            spec = self.spec
            self.fn = forms.build_placed(spec["type"], {**spec["attrs"], "step": self.step}, spec["inputs"],
                                         spec["outputs"])
            self._fn_step = self.step
        with torch.no_grad():
            return forms.as_tuple(self.fn(*inputs))

    # --- backward paths -----------------------------------------------------------------------------

    def _split_args(self, args):
        """(saved inputs or None, saved outputs or None, output gradients) of a backward part's arguments."""
        fw = self.forward
        pos = 0
        inputs = outputs = None
        if fw["saved_inputs"]:
            pos = len(fw["inputs"])
            inputs = list(args[:pos])
        if fw["saved_outputs"]:
            n_out = len(fw["outputs"])
            outputs, pos = list(args[pos:pos + n_out]), pos + n_out
        grads = args[pos:]
        if len(grads) != len(self._grad_dtypes):
            raise SubOpError(f"sub-op '{self.name}': {len(grads)} output gradients for grad_outputs {fw['grad_outputs']}")
        return inputs, outputs, grads

    def _closed_form(self, args, writable):
        """The backward part through its closed-form rule: gradients in the forward inputs' dtypes, zeros
        for an input the rule leaves untouched (no path from the output gradients)."""
        inputs, outputs, grads = self._split_args(args)
        grads = [g if g is None or g.dtype == want else g.to(want) for g, want in zip(grads, self._grad_dtypes)]
        result = self.rule(inputs, outputs, grads)
        fw = self.forward
        return tuple(_zeros(fw["inputs"][i], self.device) if r is None else r if r.dtype == want else r.to(want)
                     for r, i, want in zip(result, fw["grad_inputs"], self._input_dtypes))

    def _from_output(self, args, writable):
        """A forward that saved only its output: the family's gradient from the output."""
        fw = self.forward
        _, outputs, grads = self._split_args(args)
        y, g = outputs[fw["grad_outputs"][0]], grads[0]
        return (forms.FROM_OUTPUT[fw["type"]](fw["attrs"], y, g if g.dtype == y.dtype else g.to(y.dtype)),)

    def _autograd(self, args, writable):
        """torch.autograd over the forward part's form (over zeros for inputs it did not save)."""
        fw = self.forward
        inputs, outputs, grads = self._split_args(args)
        if inputs is None:
            inputs = [_zeros(s, self.device) for s in fw["inputs"]]
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
        return tuple((torch.zeros_like(x) if r is None else r).detach() for r, x in zip(result, leaves))
