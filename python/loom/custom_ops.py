"""loom.register_op: the user's own ops (docs/custom_ops.md), as nnScaler's register_op.

    def bias_gelu(x, bias):                    # module level: the runtime imports it by its path
        y = x + bias
        return 0.5 * y * (1 + torch.erf(y / math.sqrt(2)))

    loom.register_op(bias_gelu, "b s h, h -> b s h", flops=8)

The tracer keeps every call to a registered function whole (torch.fx autowrap: it does not trace into
it) and writes it as one op of type "custom.<name>" whose attribute "callable" is "module:qualname".
The graph file carries the definitions ("custom_ops": type, annotation, FLOPs per output element,
differentiable); the engine partitions the op as its annotation allows, like any registry op, and the
runtime runs a shard by calling the function on the local pieces, its backward by autograd of it.

The annotation is the engine's dimension language (docs/annotations.md): one tensor per tensor
argument, one per returned tensor. A dimension may be split unless it is frozen ('^'); a '+' dimension
(summed over) may be split too, the outputs becoming partial sums. The function must compute each shard
from the shards the annotation says it reads: an identifier on every tensor of a dimension that mixes
across it (softmax over h) must be frozen ("b h^ -> b h^").
"""

import importlib
import re

PREFIX = "custom."
CALLABLE_ATTR = "callable"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")

_REGISTERED = {}  # function -> CustomOp


class CustomOp:
    """One registered function: its op type, annotation, callable path, FLOPs and whether it is differentiable."""

    def __init__(self, fn, type_, annotation, path, flops, differentiable, inputs, outputs):
        self.fn, self.type, self.annotation, self.path = fn, type_, annotation, path
        self.flops, self.differentiable = flops, differentiable
        self.inputs, self.outputs = inputs, outputs  # tensor counts the annotation gives

    def definition(self):
        """The graph file's "custom_ops" entry (src/frontend/custom_op_section.cc)."""
        return {"type": self.type, "annotation": self.annotation, "flops_per_element": float(self.flops),
                "differentiable": self.differentiable}


def callable_path(fn):
    """"module:qualname" of a function importable at module level; ValueError naming the fix otherwise."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not callable(fn) or not module or not qualname:
        raise ValueError(f"loom.register_op: {fn!r} is not a named function")
    if "<locals>" in qualname or "<lambda>" in qualname:
        raise ValueError(f"loom.register_op: {module}.{qualname} is defined inside a function or is a lambda; "
                         "define it at module level, so every rank's process can import it")
    if module == "__main__":
        raise ValueError(f"loom.register_op: {qualname} is defined in the __main__ script; move it into a module "
                         "that the ranks' processes can import")
    path = f"{module}:{qualname}"
    try:
        found = import_callable(path)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"loom.register_op: {path} cannot be imported back ({e}); define it at module level") from None
    if found is not fn:
        raise ValueError(f"loom.register_op: importing {path} gives another object than the function registered; "
                         "register the module-level function itself")
    return path


def import_callable(path):
    """The function a "module:qualname" path names (what the runtime runs for a custom op)."""
    module, _, qualname = path.partition(":")
    value = importlib.import_module(module)
    for part in qualname.split("."):
        value = getattr(value, part)
    return value


def _tensor_count(side):
    side = side.strip()
    return 0 if not side else len(side.split(","))


def register_op(fn, annotation, name=None, flops=None, differentiable=True):
    """Registers `fn` as one op of the traced graph; returns `fn` (so it also works as `f = register_op(f, ...)`).

    annotation: "b s h, h -> b s h": one tensor per tensor argument, then '->', one per returned tensor
      (the engine checks it fully when it reads the graph, naming the op).
    name: the op type is "custom.<name>" (default: the function's name).
    flops: forward FLOPs per element of the first output (default 0: priced by its memory traffic).
    differentiable: False for functions no gradient flows through (no backward op is planned).
    """
    path = callable_path(fn)
    name = fn.__name__ if name is None else name
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"loom.register_op: name {name!r} is not an identifier (letters, digits, '_', dots)")
    if not isinstance(annotation, str) or annotation.count("->") != 1:
        raise ValueError(f"loom.register_op({path}): annotation {annotation!r} needs exactly one '->' between the "
                         "inputs and the outputs, e.g. \"b s h, h -> b s h\"")
    if flops is not None and (isinstance(flops, bool) or not isinstance(flops, (int, float)) or not flops >= 0):
        raise ValueError(f"loom.register_op({path}): flops={flops!r} is not a number >= 0 (FLOPs per output element)")
    left, right = annotation.split("->")
    op = CustomOp(fn, PREFIX + name, annotation.strip(), path, flops or 0, bool(differentiable),
                  _tensor_count(left), _tensor_count(right))
    for other in _REGISTERED.values():
        if other.type == op.type and other.fn is not fn:
            raise ValueError(f"loom.register_op: op type '{op.type}' is already {other.path}; pass another name=")
    if op.outputs == 0:
        raise ValueError(f"loom.register_op({path}): annotation {annotation!r} has no output")
    from . import lowering
    _REGISTERED[fn] = op
    lowering.FUNCTIONS[fn] = _handler(op)
    return fn


def registered(fn):
    """The CustomOp of a registered function, else None."""
    return _REGISTERED.get(fn)


def leaf_functions():
    """The registered functions: torch.fx's tracers keep calls to them whole (autowrap_functions)."""
    return tuple(_REGISTERED)


def _handler(op):
    """Lowers a call of the registered function to one "custom.<name>" op over its tensor arguments."""
    import torch

    from .lowering import T

    def handler(cx, args, kwargs, value):
        if kwargs:
            raise TypeError(f"{op.path} (loom.register_op): called with keyword argument(s) {sorted(kwargs)}; "
                            "pass its tensors by position")
        tensors = list(args)
        for k, a in enumerate(tensors):
            if not isinstance(a, (T, torch.Tensor)):
                raise TypeError(f"{op.path} (loom.register_op): argument {k} is {type(a).__name__}, not a tensor; "
                                "a registered op takes tensors only (fix other values inside the function)")
        outputs = value if isinstance(value, (tuple, list)) else (value,)
        if not all(isinstance(o, torch.Tensor) for o in outputs):
            raise TypeError(f"{op.path} (loom.register_op): it returns {type(value).__name__}; return a tensor or "
                            "a tuple of tensors")
        if (len(tensors), len(outputs)) != (op.inputs, op.outputs):
            raise TypeError(f"{op.path} (loom.register_op): called with {len(tensors)} tensor(s) returning "
                            f"{len(outputs)}, its annotation '{op.annotation}' has {op.inputs} input(s) and "
                            f"{op.outputs} output(s)")
        attrs = {CALLABLE_ATTR: op.path}
        if isinstance(value, (tuple, list)):
            return type(value)(cx.emit_many(op.type, tensors, attrs, outputs))
        return cx.emit(op.type, tensors, attrs, value)

    return handler


def attach_definitions(graph):
    """Adds the graph dict's "custom_ops" section: the definition of every custom op type it uses."""
    used = sorted({o["type"] for o in graph["ops"] if o["type"].startswith(PREFIX)})
    if used:
        by_type = {op.type: op for op in _REGISTERED.values()}
        graph["custom_ops"] = [by_type[t].definition() for t in used]
    return graph
