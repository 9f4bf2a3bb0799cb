"""Capture through torch.export (capture="export"): PyTorch's own graph capture, at the ATen level, on fake tensors.

1. The module and its loss (its own `.loss`, or loss(outputs, batch)) are wrapped as one module returning the
   scalar, exported with `torch.export.export(..., strict=False)` (the module's Python runs on fake tensors:
   no weight is read, so parameters may live on the meta device).
2. `run_decompositions` with torch's default table less the ops the ATen handler table maps whole
   (lowering/aten.py): composite ops the registry lacks are decomposed, linear / layer_norm /
   scaled_dot_product_attention / cross_entropy_loss stay one op; the graph comes out functional.
3. Every node gets a value: a node computed from constants only (positions, masks, rotary tables: no input,
   no parameter) is evaluated concretely on the CPU, so the lowering folds it as today's does; any other
   node's value is a meta tensor of the shape and dtype export recorded (its elements are never needed).
Module paths (node.meta["nn_module_stack"]) lose the wrapper's prefix, so ops are named as the fx route names them.
"""

import contextlib
import inspect
import operator

import torch
import torch.fx as fx
import torch.nn as nn
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils import _pytree as pytree

from .capture import _Outputs  # a dict output read by key or attribute in a loss function

_MODEL = "model"  # the wrapper's attribute holding the user's module (stripped from module paths)
_SHAPE_ONLY = {getattr(torch.ops.aten, name) for name in (  # their values depend on no operand's elements
    "zeros_like", "ones_like", "full_like", "empty_like", "new_zeros", "new_ones", "new_full", "new_empty")}
_CHECKS = {torch.ops.aten._assert_tensor_metadata.default, torch.ops.aten._assert_scalar.default,
           torch.ops.aten._assert_async.msg, torch.ops.aten.sym_constrain_range_for_size.default}


class _WithLoss(nn.Module):
    """module(**batch) and its loss as one scalar: the module's own (picked by `find_loss`) or loss(outputs,
    batch). The example tensors come by position (in `names` order), the fixed arguments are closed over."""

    def __init__(self, module, names, fixed, loss, find_loss):
        super().__init__()
        setattr(self, _MODEL, module)
        self.names, self.fixed, self.loss, self.find_loss = names, fixed, loss, find_loss
        self.taken = inspect.signature(module.forward).parameters

    def forward(self, *tensors):
        batch = {**self.fixed, **dict(zip(self.names, tensors))}
        module = getattr(self, _MODEL)
        accepts_any = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in self.taken.values())
        outputs = module(**{k: v for k, v in batch.items() if accepts_any or k in self.taken})
        if self.loss is not None:
            return self.loss(_Outputs(outputs) if isinstance(outputs, dict) else outputs, batch)
        return self.find_loss(outputs)


def _decompositions():
    """torch's default decomposition table less every op the ATen handler table lowers whole."""
    from .lowering.aten import ATEN
    table = torch.export.default_decompositions()
    for op in ATEN:
        if op in table:
            table.pop(op)
    return table


def capture(module, inputs, concrete_args, loss, find_loss):
    """(GraphModule at the ATen level, {node: value}, {placeholder: input name}) of module(**inputs) and its loss.
    Tensors among `inputs` are the graph's inputs; anything else is fixed, as concrete_args are."""
    names = [name for name, value in inputs.items() if isinstance(value, torch.Tensor)]
    fixed = {name: value for name, value in inputs.items() if name not in names}
    fixed.update(concrete_args or {})
    taken = inspect.signature(module.forward).parameters
    if "use_cache" in taken and "use_cache" not in fixed:
        fixed["use_cache"] = False  # no key/value cache objects in a training step's graph
    wrapper = _WithLoss(module, names, fixed, loss, find_loss)
    with _autocast_on_meta(), _batched_experts(module):
        exported = torch.export.export(wrapper, _distinct(inputs[name] for name in names), strict=False)
    exported = exported.run_decompositions(_decompositions())
    gm = exported.graph_module
    _check_outputs(exported)
    _strip_wrapper_scope(gm)
    placeholders, aliases, traced = _placeholder_values(exported, wrapper, inputs, names)
    return gm, _record(gm, placeholders, traced), aliases


@contextlib.contextmanager
def _autocast_on_meta():
    """torch.autocast(device_type="meta") raises, and HuggingFace's rotary embeddings disable autocast on their
    input's device (a model built on meta): there it is the CPU's autocast (disabled, so nothing changes)."""
    autocast = torch.amp.autocast_mode.autocast
    original = autocast.__init__

    def init(self, device_type, *args, **kwargs):
        original(self, "cpu" if device_type == "meta" else device_type, *args, **kwargs)

    autocast.__init__ = init
    try:
        yield
    finally:
        autocast.__init__ = original


@contextlib.contextmanager
def _batched_experts(module):
    """transformers 5's mixture-of-experts blocks in their `batched_mm` form while exporting: each token's top-k
    experts' weights gathered (index_select) and applied by batched matmuls, all shapes static. The default
    `grouped_mm` sorts tokens by expert into groups whose sizes depend on the routing (histc, sort, index_put,
    a grouped matmul), and `eager` loops over the experts a batch hits: neither has a static graph. The three
    compute the same function; the module's own setting is restored afterwards."""
    current = getattr(getattr(module, "config", None), "_experts_implementation", None)
    switched = False
    if current not in (None, "batched_mm") and hasattr(module, "set_experts_implementation"):
        try:
            module.set_experts_implementation("batched_mm")
            switched = True
        except (ValueError, RuntimeError, ImportError):  # a model whose experts offer no such form stays as it is
            pass
    try:
        yield
    finally:
        if switched:
            module.set_experts_implementation(current)


def _distinct(tensors):
    """The example tensors, one passed twice (T5's decoder inputs and labels) given as a copy the second time:
    export would make the two arguments one graph input."""
    seen, out = set(), []
    for t in tensors:
        out.append(t.clone() if id(t) in seen else t)
        seen.add(id(t))
    return tuple(out)


_STATISTICS = (torch.ops.aten._native_batch_norm_legit_functional.default,)


def _check_outputs(exported):
    """The exported graph's outputs less the buffers it updates, when every update is a training-mode batch
    norm's running statistics (outputs 3 and 4 of its functional op, which the lowering turns into the step's
    own buffer updates: lowering/aten_norms.py) or its step count; any other buffer update is refused."""
    gm = exported.graph_module
    output = next(n for n in gm.graph.nodes if n.op == "output")
    values = list(output.args[0])
    kept, refused = [], []
    for spec, value in zip(exported.graph_signature.output_specs, values):
        if spec.kind != OutputKind.BUFFER_MUTATION:
            kept.append(value)
        elif not (spec.target.endswith("num_batches_tracked") or (
                isinstance(value, fx.Node) and value.target is operator.getitem and value.args[1] in (3, 4)
                and getattr(value.args[0], "target", None) in _STATISTICS)):
            refused.append(spec.target)
    if refused:
        raise NotImplementedError(f"the exported step updates buffers ({', '.join(refused[:3])}) other than batch "
                                  "norms' running statistics: capture='fx' may capture them")
    output.args = (tuple(kept),)


def _strip_wrapper_scope(gm):
    prefix = _MODEL + "."
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if not stack:
            continue
        node.meta["nn_module_stack"] = {
            key: (path[len(prefix):] if path.startswith(prefix) else ("" if path == _MODEL else path), kind)
            for key, (path, kind) in stack.items()}


def _placeholder_values(exported, wrapper, inputs, names):
    """({placeholder node: value}, {placeholder: input name}, the placeholders of parameters and inputs):
    parameters and buffers as the module's own tensors (so they are named by their module paths), lifted
    constants, and the example inputs."""
    by_name = {n.name: n for n in exported.graph_module.graph.nodes if n.op == "placeholder"}
    values, aliases, traced = {}, {}, set()
    user = iter(names)
    for spec in exported.graph_signature.input_specs:
        node = by_name[spec.arg.name]
        if spec.kind == InputKind.PARAMETER:
            values[node] = wrapper.get_parameter(spec.target)
            traced.add(node)
        elif spec.kind == InputKind.BUFFER:
            values[node] = wrapper.get_buffer(spec.target)
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            values[node] = exported.constants[spec.target]
        elif spec.kind == InputKind.USER_INPUT:
            name = next(user)
            values[node], aliases[node.target] = inputs[name], name
            traced.add(node)
        else:
            raise NotImplementedError(f"exported input {spec.arg.name} of kind {spec.kind.name}")
    return values, aliases, traced


def _record(gm, placeholders, traced):
    """{node: value}: placeholders as given; a node reading no input or parameter (directly or through
    other nodes) evaluated on the CPU (on the meta device when it reads a tensor that lives there); any other
    node a meta tensor shaped as export recorded."""
    values = dict(placeholders)
    dynamic = set(traced)
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target in _CHECKS:
            values[node] = None
            continue
        reads = [n for n in pytree.tree_leaves((node.args, node.kwargs)) if isinstance(n, fx.Node)]
        if getattr(node.target, "overloadpacket", None) in _SHAPE_ONLY:  # zeros_like(x): a constant whatever x is
            args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda n: _stand_in(values[n]))
            values[node] = _evaluate(node.target, args, kwargs)
            continue
        if any(n in dynamic for n in reads):
            dynamic.add(node)
            values[node] = pytree.tree_map(_as_meta, node.meta.get("val"))
            continue
        args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda n: values[n])
        values[node] = _evaluate(node.target, args, kwargs)
    return values


def _evaluate(target, args, kwargs):
    """The op on concrete tensors: on the CPU, or on meta when one of its operands is a meta tensor (a buffer
    of a model built on the meta device: its elements are unknown)."""
    tensors = [v for v in pytree.tree_leaves((args, kwargs)) if isinstance(v, torch.Tensor)]
    device = torch.device("meta") if any(t.device.type == "meta" for t in tensors) else torch.device("cpu")
    if "device" in kwargs:
        kwargs = {**kwargs, "device": device}
    args, kwargs = pytree.tree_map_only(torch.Tensor, lambda t: t.to(device), (args, kwargs))
    with torch.no_grad():
        return target(*args, **kwargs)


def _stand_in(value):
    """A traced operand of a shape-only op: zeros of its shape and dtype (on the CPU; its values are not read)."""
    if isinstance(value, torch.Tensor) and value.device.type == "meta":
        return torch.zeros(value.shape, dtype=value.dtype)
    return value


def _as_meta(value):
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    return value
