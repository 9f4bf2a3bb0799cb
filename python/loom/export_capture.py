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
Buffers the step updates (batch norm's running statistics) are the graph's state: what reads them is traced, not
folded, and each output export lists as a buffer mutation becomes that buffer's next value (tracer_lowering.py).
Control flow and sizes that depend on tensor values are specialized to the examples (`capture`, `_record`,
`_fold_numbers`; docs/capture.md).
"""

import contextlib
import inspect
import io
import logging
import sys

import torch
import torch.fx as fx
import torch.nn as nn
from torch.export.graph_signature import InputKind, OutputKind
from torch.overrides import TorchFunctionMode
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode, free_unbacked_symbols
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
        with _DataAsDetach():
            outputs = module(**{k: v for k, v in batch.items() if accepts_any or k in self.taken})
        if self.loss is not None:
            return self.loss(_Outputs(outputs) if isinstance(outputs, dict) else outputs, batch)
        return self.find_loss(outputs)


class _DataAsDetach(TorchFunctionMode):
    """x.data read as x.detach() (the same elements, no gradient): export takes `.data` of a traced tensor for a
    constant (I-BERT's activation statistics, `x.data.min()`), whose elements are then unknown."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__self__", None) is torch._C.TensorBase.data and func.__name__ == "__get__":
            return args[0].detach()
        return func(*args, **(kwargs or {}))


class _MasksAsPositions(TorchFunctionMode):
    """x[mask] and x[mask] = v with a boolean mask spelled x[mask.nonzero().unbind(1)] while exporting
    specialized to the examples (the same elements: torch's own meaning of a mask index). Export then
    creates the mask's count at the nonzero (torch 2.13's fake index of a boolean mask, with real values
    propagated, returns the examples' count where it created a symbol and fails); the lowering reads the
    columns of one nonzero back as its mask (lowering/aten_masked.py)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if (func is torch.where and len(args) == 1 and not kwargs) or (
                func in (torch.nonzero, torch.Tensor.nonzero) and kwargs.get("as_tuple")):
            return args[0].nonzero().unbind(1)  # torch.where(mask), nonzero(as_tuple=True): the same columns
        if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__) and len(args) >= 2:
            index = args[1] if isinstance(args[1], tuple) else (args[1],)
            if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in index):
                spelled = tuple(p for i in index for p in (
                    i.nonzero().unbind(1) if isinstance(i, torch.Tensor) and i.dtype == torch.bool else (i,)))
                args = (args[0], spelled, *args[2:])
        return func(*args, **kwargs)


def _decompositions():
    """torch's default decomposition table less every op the ATen handler table lowers whole."""
    from .lowering.aten import ATEN
    table = torch.export.default_decompositions()
    for op in ATEN:
        if op in table:
            table.pop(op)
    return table


def capture(module, inputs, concrete_args, loss, find_loss):
    """(GraphModule at the ATen level, {node: value}, {placeholder: input name}, updated) of module(**inputs) and
    its loss; updated: per output of the graph, the buffer it is the next value of (None: the module's output).
    Tensors among `inputs` are the graph's inputs; anything else is fixed, as concrete_args are."""
    names = [name for name, value in inputs.items() if isinstance(value, torch.Tensor)]
    fixed = {name: value for name, value in inputs.items() if name not in names}
    fixed.update(concrete_args or {})
    taken = inspect.signature(module.forward).parameters
    if "use_cache" in taken and "use_cache" not in fixed:
        fixed["use_cache"] = False  # no key/value cache objects in a training step's graph
    wrapper = _WithLoss(module, names, fixed, loss, find_loss)
    examples = _distinct(inputs[name] for name in names)
    notes = io.StringIO()  # stderr while exporting: a failed export prints its partial graph there
    specialized = False
    try:
        with contextlib.redirect_stderr(notes):
            exported = _export(wrapper, module, examples, specialize=False)
    except GuardOnDataDependentSymNode as error:  # the examples decide it: export again, specialized to them
        if any(t.device.type == "meta" for t in (*module.parameters(), *module.buffers())):
            raise ValueError(f"{type(module).__name__}: control flow or a size depends on tensor values "
                             f"({error.args[0].splitlines()[0]}), and the model is on the meta device, so "
                             "the examples cannot decide it: trace it with its weights on the CPU") from error
        exported = _export(wrapper, module, examples, specialize=True)
        specialized = True
    except Exception:
        sys.stderr.write(notes.getvalue())
        raise
    else:
        sys.stderr.write(notes.getvalue())
    gm = exported.graph_module
    updated = [wrapper.get_buffer(spec.target) if spec.kind == OutputKind.BUFFER_MUTATION else None
               for spec in exported.graph_signature.output_specs]
    _strip_wrapper_scope(gm)
    placeholders, aliases, traced = _placeholder_values(exported, wrapper, inputs, names, updated)
    values = _record(gm, placeholders, traced, specialized)
    _fold_numbers(gm, values)
    return gm, values, aliases, updated


def _export(wrapper, module, examples, specialize):
    """torch.export of the wrapper, decomposed. specialize: a branch or size that depends on tensor values
    (a check that no activation is NaN, a count of separator tokens, the tokens a mask picks) is decided by
    the examples' own values, as torch's draft_export does: fake tensors carry the real ones
    (fake_tensor_propagate_real_tensors), so the graph is the one these examples take. Sizes that stay
    data-dependent (unbacked) get the examples' values in `_record`."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(_autocast_on_meta())
        stack.enter_context(_batched_experts(module))
        # symbolic_shapes warns of each value the examples decide, and where a data-dependent guard has no source
        stack.enter_context(_quiet(logging.getLogger("torch.fx.experimental.symbolic_shapes")))
        if specialize:
            stack.enter_context(torch._functorch.config.patch(fake_tensor_propagate_real_tensors=True))
            stack.enter_context(_MasksAsPositions())
            stack.enter_context(_parameters_propagated())
        exported = torch.export.export(wrapper, examples, strict=False)
        return exported.run_decompositions(_decompositions())


@contextlib.contextmanager
def _parameters_propagated():
    """torch 2.13's fake tensors of parameters carry their real values too: its meta converter copies a real
    value only from a plain torch.Tensor (`type(src) is torch.Tensor` in meta_utils._safe_copy / _safe_clone),
    so an nn.Parameter's real tensor was uninitialized memory, and a branch on a weight's or an activation's
    value was decided on garbage (I-BERT's NaN check of its activations)."""
    from torch._subclasses import meta_utils
    copy, clone = meta_utils._safe_copy, meta_utils._safe_clone

    def safe_copy(dst, src):
        if isinstance(src, torch.Tensor) and not isinstance(src, torch._subclasses.FakeTensor):
            dst.copy_(src.detach())

    def safe_clone(src):
        if isinstance(src, torch.Tensor) and not isinstance(src, torch._subclasses.FakeTensor):
            return src.detach().clone()
        return None

    meta_utils._safe_copy, meta_utils._safe_clone = safe_copy, safe_clone
    try:
        yield
    finally:
        meta_utils._safe_copy, meta_utils._safe_clone = copy, clone


@contextlib.contextmanager
def _quiet(logger):
    """The logger's warnings left out (torch.export's one per value the examples decide)."""
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


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


def _strip_wrapper_scope(gm):
    prefix = _MODEL + "."
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if not stack:
            continue
        node.meta["nn_module_stack"] = {
            key: (path[len(prefix):] if path.startswith(prefix) else ("" if path == _MODEL else path), kind)
            for key, (path, kind) in stack.items()}


def _placeholder_values(exported, wrapper, inputs, names, updated):
    """({placeholder node: value}, {placeholder: input name}, the placeholders of parameters, inputs and the
    buffers in `updated`): parameters and buffers as the module's own tensors (so they are named by their module
    paths), lifted constants, and the example inputs."""
    state = {id(b) for b in updated if b is not None}
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
            if id(values[node]) in state:
                traced.add(node)
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            values[node] = exported.constants[spec.target]
        elif spec.kind == InputKind.USER_INPUT:
            name = next(user)
            values[node], aliases[node.target] = inputs[name], name
            traced.add(node)
        else:
            raise NotImplementedError(f"exported input {spec.arg.name} of kind {spec.kind.name}")
    return values, aliases, traced


def _record(gm, placeholders, traced, specialized=False):
    """{node: value}: placeholders as given; a node reading no input or parameter (directly or through
    other nodes) evaluated on the CPU (on the meta device when it reads a tensor that lives there); any other
    node a meta tensor shaped as export recorded."""
    values = dict(placeholders)
    dynamic = set(traced)
    # A specialized graph is run on the examples also for its checks of each decision the examples made
    # (export's runtime asserts): torch 2.13 propagates the inputs' values, not the weights', so a branch on
    # a weight's value may have been decided wrongly while exporting; that fails here, naming the check.
    concrete = _run_on_examples(gm, placeholders) if specialized or _has_unbacked_sizes(gm) else None
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target in _CHECKS:
            values[node] = None
            continue
        reads = [n for n in pytree.tree_leaves((node.args, node.kwargs)) if isinstance(n, fx.Node)]
        if node.target == torch.ops.aten.type_as.default and node.args[0] not in dynamic:
            # x.type_as(y) reads y's dtype only: constant x stays constant (PegasusX's sinusoids)
            args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda n: _stand_in(values[n]))
            values[node] = _evaluate(node.target, args, kwargs)
            continue
        if getattr(node.target, "overloadpacket", None) in _SHAPE_ONLY:  # zeros_like(x): a constant whatever x is
            args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda n: _stand_in(values[n]))
            values[node] = _evaluate(node.target, args, kwargs)
            continue
        if any(n in dynamic for n in reads):
            dynamic.add(node)
            values[node] = pytree.tree_map(_as_meta, node.meta.get("val") if concrete is None else concrete[node])
            continue
        args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda n: values[n])
        values[node] = _evaluate(node.target, args, kwargs)
    return values


def _fold_numbers(gm, values):
    """Numbers the graph reads from tensors (sizes, .item()s; with data-dependent sizes, the examples' own)
    written into their readers in place of their nodes, and export's checks on them dropped (they hold on the
    examples, which the graph is specialized to): a tensor the graph read only for such numbers (the distinct
    counts of end-of-sentence tokens a check compares) is then unused, and removed as dead code."""
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in _CHECKS and not node.users:
            graph.erase_node(node)
        elif type(values.get(node)) in (bool, int, float):
            number = values[node]
            for user in list(node.users):
                user.args, user.kwargs = fx.node.map_arg((user.args, user.kwargs),
                                                         lambda n: number if n is node else n)
            graph.erase_node(node)
    graph.eliminate_dead_code()
    gm.recompile()


def _has_unbacked_sizes(gm):
    """Whether a size or number in the graph depends on tensor values (torch.export's unbacked symbols: the
    count of a mask's true elements, an .item())."""
    return any(free_unbacked_symbols(node.meta.get("val")) for node in gm.graph.nodes if node.op == "call_function")


def _run_on_examples(gm, placeholders):
    """{node: value} of the graph run on the examples and the module's own weights: the sizes and numbers
    that depend on tensor values, as these examples give them (the capture is specialized to them)."""
    if any(isinstance(v, torch.Tensor) and v.device.type == "meta" for v in placeholders.values()):
        raise ValueError("a size in the captured graph depends on tensor values (a boolean mask's count, an "
                         ".item()), and the model is on the meta device, so the examples cannot fix it: trace "
                         "it with its weights on the CPU")
    values = {}

    class Recorder(fx.Interpreter):
        def run_node(self, node):
            values[node] = super().run_node(node)
            return values[node]

    order = [n for n in gm.graph.nodes if n.op == "placeholder"]
    with torch.no_grad():
        Recorder(gm).run(*[placeholders[n] for n in order])
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
