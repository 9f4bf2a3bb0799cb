"""loom.trace: a torch.nn.Module and example inputs to the engine's graph JSON (a Python dict).

1. capture (capture.py): torch.fx (HuggingFace's tracer for its models), the loss appended, every
   node's value recorded on the examples;
2. lower (lowering/): each node whose value depends on an input or a parameter becomes registry ops;
   values that do not (sizes, dtypes, position ids, masks built from constants) are folded: numbers
   stay numbers, tensors become "buffer" tensors;
3. finish: fused projections cut into equal parts (GPT-2's c_attn) laid out per part, so tensor parallelism
   splits them per head (fused_projection.py); only what the loss needs is kept (graph_json.py).
Unknown ops are all collected and reported in one UnsupportedOpsError.
"""

import operator
import warnings
from collections import OrderedDict

import torch
import torch.fx as fx
import torch.nn as nn

from . import capture as fx_capture, custom_ops, export_capture, fused_projection, lowering
from .graph_json import GraphBuilder, batch_sizes, dtype_name
from .lowering import T

_HINT = ('register the function that holds such ops with loom.register_op(fn, "annotation") (docs/custom_ops.md): '
         'the tracer then keeps its calls whole; or rewrite them with supported torch ops')


class UnsupportedOpsError(RuntimeError):
    """Every torch target the tracer cannot map, with where it occurs and how often."""

    def __init__(self, unsupported):
        self.unsupported = unsupported  # OrderedDict: target -> {"where": [node or module paths], "count": n}
        lines = [f"{len(unsupported)} unsupported op(s) in the traced model:"]
        for target, info in unsupported.items():
            where = ", ".join(info["where"][:3]) + (", ..." if len(info["where"]) > 3 else "")
            lines.append(f"  {target}: {info['count']} use(s), at {where}")
        lines.append(f"hint: {_HINT}")
        super().__init__("\n".join(lines))


_Meta = lowering.Meta


_PUBLIC_NAMES = None


def _public_name(target):
    """torch.fft.fft rather than torch._C._fft.fft_fft: the name a user wrote, from torch's namespaces."""
    global _PUBLIC_NAMES
    if _PUBLIC_NAMES is None:
        _PUBLIC_NAMES = {}
        spaces = [("torch", torch), ("torch.nn.functional", torch.nn.functional)]
        spaces += [(f"torch.{name}", getattr(torch, name)) for name in ("fft", "linalg", "special")
                   if hasattr(torch, name)]
        for prefix, space in reversed(spaces):
            for name in dir(space):
                if not name.startswith("_"):
                    _PUBLIC_NAMES.setdefault(id(getattr(space, name)), f"{prefix}.{name}")
    return _PUBLIC_NAMES.get(id(target))


def _target_name(node):
    if isinstance(node.target, torch._ops.OpOverload):
        return str(node.target)  # aten.linear.default
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    target = node.target
    if target is getattr and len(node.args) == 2 and isinstance(node.args[1], str):
        return f"Tensor.{node.args[1]}"
    public = _public_name(target)
    if public:
        return public
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or str(target)
    return f"{module}.{name}" if module else name


def _scope(node):
    """The module path a function node was called from (torch.fx's nn_module_stack), or ''."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ""
    path = list(stack.values())[-1]
    path = path[0] if isinstance(path, tuple) else path
    return path if isinstance(path, str) else ""


class Lowering:
    def __init__(self, gm, values, parameter_names, name, buffer_names=None, functions=None, state=(), batch=None):
        self.gm = gm
        self.functions = lowering.FUNCTIONS if functions is None else functions  # call_function handlers
        self.values = values
        self.graph = GraphBuilder(name)
        self.parameter_names = parameter_names  # id(parameter) -> its first module path
        self.buffer_names = buffer_names or {}  # id(buffer) -> its first module path
        self.state = {id(b) for b in state}  # buffers the step updates, read as state_buffer tensors
        self.batch = batch  # the examples' batch: constants repeated along it are stored once (constant())
        self.parameters = {}  # id(parameter) -> T
        self.constants = {}  # id(tensor) -> T
        self.lowered = {}  # node -> lowered value
        self.unsupported = OrderedDict()
        self.node = None  # the node being lowered (names its outputs)

    # -- what handlers call ----------------------------------------------------------------------
    def torch_dtype(self, x):
        if isinstance(x, T):
            return self._torch_dtypes[x]
        return x.dtype if isinstance(x, torch.Tensor) else torch.get_default_dtype()

    def dtype_name(self, dtype):
        name = dtype_name(dtype)
        if name is None:
            raise _Unsupported(f"dtype {dtype}")
        return name

    def shape(self, t):
        return self.graph.tensors[t]["shape"]

    def rank(self, t):
        return len(self.shape(t))

    def shape_after_unsqueeze(self, t, dim):
        shape = list(self.shape(t))
        shape.insert(dim, 1)
        return _Meta(shape, self.torch_dtype(t))

    def shape_after_slice(self, t, dim, start, stop, step):
        shape = list(self.shape(t))
        shape[dim] = len(range(start, stop, step))
        return _Meta(shape, self.torch_dtype(t))

    def shape_after_squeeze(self, t, dim):
        shape = list(self.shape(t))
        del shape[dim]
        return _Meta(shape, self.torch_dtype(t))

    def _new_tensor(self, name, role, meta):
        t = T(self.graph.tensor(name, role, self.dtype_name(meta.dtype), meta.shape))
        self._torch_dtypes[t] = meta.dtype
        return t

    def _name(self, suffix=None):
        node = self.node
        if node.op in ("call_module", "get_attr"):
            base = node.target
        else:
            scope = _scope(node)
            base = f"{scope}.{node.name}" if scope else node.name
        return f"{base}.{suffix}" if suffix else base

    def emit(self, type_, inputs, attrs, value, suffix=None):
        out = self._new_tensor(self._name(suffix), "activation", value)
        self.graph.op(self._name(suffix), type_, [self.tensor(i) for i in inputs], [out], attrs)
        return out

    def emit_many(self, type_, inputs, attrs, values, suffix=None):
        outs = [self._new_tensor(f"{self._name(suffix)}:{k}", "activation", v) for k, v in enumerate(values)]
        self.graph.op(self._name(suffix), type_, [self.tensor(i) for i in inputs], outs, attrs)
        return tuple(outs)

    def alias(self, t, value):
        return t

    def tensor(self, x):
        """An engine tensor for an operand: itself, a parameter, or a constant buffer."""
        if isinstance(x, T):
            return x
        if isinstance(x, nn.Parameter):
            return self._parameter(x)
        if isinstance(x, torch.Tensor):
            return self.constant(x)
        raise _Unsupported(f"operand of type {type(x).__name__}")

    def constant(self, x):
        """A constant's buffer. One that repeats along a dim of the batch's size (a mask expanded to the batch)
        is stored once along its repeated dims and expanded by an op, so its elements do not depend on the
        batch and the graph resizes (trace's "sizes")."""
        if not isinstance(x, torch.Tensor):
            x = torch.tensor(x)
        key = id(x)
        if key not in self.constants:
            self._keep_alive.append(x)
            name = self.folded_names.get(key) or f"{self._name()}.const{len(self.constants)}"
            repeated = _repeated_dims(x, self.batch)
            if repeated:
                once = x[tuple(slice(0, 1) if d in repeated else slice(None) for d in range(x.dim()))]
                base = self._new_tensor(name, "buffer", once)
                self.graph.set_value(base, once)
                self.constants[key] = self._new_tensor(f"{name}.expanded", "activation", x)
                self.graph.op(f"{name}.expanded", "expand", [base], [self.constants[key]], {"shape": list(x.shape)})
                return self.constants[key]
            self.constants[key] = self._new_tensor(name, "buffer", x)
            if x.device.type != "meta":  # on meta (from a model built there) only its shape and dtype are known
                self.graph.set_value(self.constants[key], x)  # the model's own numbers, not drawn ones
        return self.constants[key]

    def state_buffer(self, b):
        """A module buffer the step updates (batch norm's running statistics), named by its module path (the
        state_dict's key) so the trained value maps back to the module."""
        key = id(b)
        if key not in self.constants:
            self._keep_alive.append(b)
            self.constants[key] = self._new_tensor(self.buffer_names.get(key, f"{self._name()}.buffer"), "buffer", b)
            self.graph.set_value(self.constants[key], b)
        return self.constants[key]

    def derived_input(self, source, derived):
        """A scalar f32 input computed by its provider from input `source` (graph_json.py, "derived"), one per
        source and rule."""
        key = (source, repr(sorted(derived.items())))
        known = self.__dict__.setdefault("_derived", {})
        if key not in known:
            name = f"{self.graph.tensors[source]['name']}.{derived['kind']}"
            name += "" if not any(n == name for n in (t["name"] for t in self.graph.tensors)) else f".{len(known)}"
            known[key] = self._new_tensor(name, "input", _Meta((), torch.float32))
            self.graph.derive(known[key], source, derived)
        return known[key]

    def updates(self, new, old):
        """`new` is buffer `old`'s value after the step: the engine carries it to the next step. It is named
        after the buffer (`bn1.running_mean.updated`), as the optimizer names a parameter's next value."""
        self.graph.update(new, old)
        name = self.graph.tensors[old]["name"] + ".updated"
        if all(t["name"] != name for t in self.graph.tensors):
            self.graph.tensors[new]["name"] = name

    def updates_buffer(self, new, buffer):
        """Module buffer `buffer`'s next value is `new` (an output export lists as its mutation); None where the
        op computing it wrote the update itself (batch norm's running statistics, lowering/compute.py)."""
        old = self.state_buffer(buffer)
        if isinstance(new, T):
            if new not in self.graph.updated:
                self.updates(new, old)
        elif old not in self.graph.updated.values():
            raise NotImplementedError(f"the step updates buffer {self.buffer_names.get(id(buffer), '?')}, and no op "
                                      "of the graph computes its next value")

    def _parameter(self, p):
        key = id(p)
        if key not in self.parameters:
            name = self.parameter_names.get(key, self._name())
            self.parameters[key] = self._new_tensor(name, "parameter", p)
        return self.parameters[key]

    # -- the walk --------------------------------------------------------------------------------
    def run(self, inputs, aliases):
        self._torch_dtypes = {}
        self._keep_alive = []
        self.folded_names = {}  # id(folded tensor) -> the node that computed it
        output = None
        for node in self.gm.graph.nodes:
            self.node = node
            value = self.values.get(node)
            if node.op == "placeholder":
                self.lowered[node] = self._placeholder(aliases.get(node.target, node.target), value, inputs)
            elif node.op == "get_attr":
                self.lowered[node] = self._parameter(value) if isinstance(value, nn.Parameter) else value
            elif node.op == "output":
                output = fx.node.map_arg(node.args[0], lambda n: self.lowered[n])
            else:
                self.lowered[node] = self._call(node, value)
        self.node = None
        return output

    def _placeholder(self, name, value, inputs):
        if isinstance(value, nn.Parameter):  # torch.export lifts parameters to placeholders
            return self._parameter(value)
        if isinstance(value, torch.Tensor) and name in inputs:
            return self._new_tensor(name, "input", value)
        if isinstance(value, torch.Tensor) and id(value) in self.state:
            return self.state_buffer(value)
        return value

    def _call(self, node, value):
        args = fx.node.map_arg(node.args, lambda n: self.lowered[n])
        kwargs = fx.node.map_arg(node.kwargs, lambda n: self.lowered[n])
        # A module with parameters is trainable whatever it reads (an embedding of constant position ids).
        trainable = node.op == "call_module" and any(True for _ in self.gm.get_submodule(node.target).parameters())
        # x.type_as(y) reads only y's dtype (known on the examples): constant when x is (PegasusX's sinusoids).
        read = (args[:1], kwargs) if (node.op, node.target) == ("call_method", "type_as") else (args, kwargs)
        if not trainable and not _has_dynamic(read):
            if isinstance(value, torch.Tensor):
                self.folded_names.setdefault(id(value), self._name())  # names its buffer, if one is used
            return value  # folded: a number, a dtype, or a tensor made of constants (a buffer when used)
        if (node.op, node.target) in (("call_function", operator.setitem), ("call_method", "__setitem__")):
            written = self._setitem(node, args)
            if written is None:
                self._report("operator.setitem (in-place assignment of a traced value)", node)
                return value  # x[i] = y writes into x: dropping it would lose y
            self.lowered[node.args[0]] = written  # later readers of x read the written value
            return None
        if not _has_tensor(value):
            return value  # sizes, dtypes and devices of dynamic tensors are known on the examples
        if node.op == "call_function" and node.target is operator.getitem and isinstance(args[0], (tuple, list, dict)):
            return args[0][args[1]]
        try:
            if node.op == "call_module":
                module = self.gm.get_submodule(node.target)
                handler = lowering.module_handler(module)
                target = type(module).__module__ + "." + type(module).__qualname__
                result = handler(self, module, args, kwargs, value) if handler else None
            else:
                table = lowering.METHODS if node.op == "call_method" else self.functions
                handler = table.get(node.target) if isinstance(node.target, str) or _hashable(node.target) else None
                target = _target_name(node)
                result = handler(self, args, kwargs, value) if handler else None
        except _Unsupported as e:
            target = f"{_target_name(node) if node.op != 'call_module' else node.target} ({e})"
            result = None
        if result is None:
            self._report(target, node)
            return self._stand_in(value)
        return result

    def _setitem(self, node, args):
        """x[index] = v as a new value of x: where(mask, v placed in x's shape, x), the mask a constant true
        on the written region. Basic indexing only (slices of step 1, integers). Refused (None) when x was read
        before the write by anything but another write: a view taken then would see the write in torch."""
        x_node = node.args[0]
        if not isinstance(x_node, fx.Node) or len(args) != 3:
            return None
        if x_node.op == "get_attr" and str(x_node.target).startswith("_tensor_constant"):
            return None  # a real tensor made mid-trace: torch.fx computed its later reads as constants
            # (x = torch.zeros(3, 4); x[1:] = traced; x.sum() is traced as a number), so the write is lost
        order = self.__dict__.setdefault("_order", {n: k for k, n in enumerate(self.gm.graph.nodes)})
        if any(order[u] < order[node] and u.target not in (operator.setitem, "__setitem__") for u in x_node.users):
            return None
        return self.write(*args)

    def write(self, x, index, v):
        """x with x[index] = v, as a new value (None where not lowered): where(mask, v placed in x's shape, x),
        the mask a constant true on the written region. Basic indexing only (slices of step 1, integers)."""
        if not isinstance(x, (T, torch.Tensor)):
            return None
        base = self.tensor(x)
        shape, dtype = list(self.shape(base)), self.torch_dtype(base)
        index = index if isinstance(index, tuple) else (index,)
        if any(not (isinstance(i, int) or i is Ellipsis or (isinstance(i, slice) and i.step in (None, 1)))
               for i in index):
            return None
        probe = torch.zeros(shape, dtype=torch.bool)
        probe[index] = True

        def blend(placed):  # placed: the written values in x's shape, zero elsewhere
            if dtype.is_floating_point or dtype == torch.bool:
                return self.emit("where", [self.constant(probe), placed, base], {}, _Meta(shape, dtype),
                                 suffix="written")
            # Integers (XGLM's shifted labels): x * keep + placed, exact; the engine's where gives a float or bool.
            kept = self.emit("mul", [base, self.constant((~probe).to(dtype))], {}, _Meta(shape, dtype), suffix="kept")
            return self.emit("add", [kept, placed], {}, _Meta(shape, dtype), suffix="written")

        if not isinstance(v, T):  # a constant written: x's new value where the mask is, as one buffer
            full = torch.zeros(shape, dtype=dtype)
            full[index] = v.to(dtype) if isinstance(v, torch.Tensor) else v
            return blend(self.constant(full))
        # The region with the dims an integer index removes kept as size 1, then padded to x's shape.
        region = list(torch.zeros(shape)[index].shape)
        if self.torch_dtype(v) != dtype:
            v = self.emit("cast", [v], {"dtype": self.dtype_name(dtype)}, _Meta(self.shape(v), dtype), suffix="cast")
        if list(self.shape(v)) != region:
            v = self.emit("expand", [v], {"shape": region}, _Meta(region, dtype), suffix="expand")
        spans = []  # (start, stop) of the region in every dim of x
        expanded = []
        for i in index:
            expanded.extend([slice(None)] * (len(shape) - sum(1 for j in index if j is not Ellipsis))
                            if i is Ellipsis else [i])
        expanded += [slice(None)] * (len(shape) - len(expanded))
        lifted = []
        for d, (i, size) in enumerate(zip(expanded, shape)):
            if isinstance(i, int):
                start = i + size if i < 0 else i
                spans.append((start, start + 1))
                lifted.append(1)
            else:
                start, stop, _ = i.indices(size)
                spans.append((start, max(start, stop)))
                lifted.append(max(0, stop - start))
        if 0 in lifted:
            return base  # an empty region: nothing written
        if lifted != region:
            v = self.emit("reshape", [v], {"shape": lifted}, _Meta(lifted, dtype), suffix="lifted")
        pads = [p for (start, stop), size in reversed(list(zip(spans, shape))) for p in (start, size - stop)]
        if any(pads):
            v = self.emit("pad", [v], {"pads": pads}, _Meta(shape, dtype), suffix="placed")
        return blend(v)

    def _report(self, target, node):
        where = node.target if node.op == "call_module" else (_scope(node) + "." + node.name).lstrip(".")
        info = self.unsupported.setdefault(target, {"where": [], "count": 0})
        info["where"].append(where)
        info["count"] += 1

    def _stand_in(self, value):
        # Lets the walk go on, so that every unsupported op is found; the graph is never written.
        if isinstance(value, torch.Tensor):
            dtype = value.dtype if dtype_name(value.dtype) else torch.float32
            return T(self._new_tensor(self._name(), "activation", _Meta(value.shape, dtype)))
        if isinstance(value, (tuple, list)):
            return type(value)(self._stand_in(v) for v in value)
        return value


class _Unsupported(Exception):
    pass


def _hashable(x):
    try:
        hash(x)
        return True
    except TypeError:
        return False


def _repeated_dims(x, batch):
    """The dims along which constant `x` repeats its first slice, where one of them has the batch's size; else
    none (a constant that does not follow the batch is kept as it is)."""
    if batch is None or batch < 2 or x.device.type == "meta" or batch not in x.shape:
        return set()
    repeated = {d for d, size in enumerate(x.shape) if size > 1 and torch.equal(x, x.narrow(d, 0, 1).expand_as(x))}
    return repeated if any(x.shape[d] == batch for d in repeated) else set()


def _has_dynamic(x):
    found = False

    def visit(v):
        nonlocal found
        if isinstance(v, T):
            found = True
        elif isinstance(v, (tuple, list)):
            for item in v:
                visit(item)
        elif isinstance(v, dict):
            for item in v.values():
                visit(item)
        elif isinstance(v, slice):
            visit((v.start, v.stop, v.step))
    visit(x)
    return found


def _has_tensor(x):
    if isinstance(x, torch.Tensor):
        return True
    if isinstance(x, (tuple, list)):
        return any(_has_tensor(v) for v in x)
    if isinstance(x, dict):
        return any(_has_tensor(v) for v in x.values())
    return False


def _traced_leaves(output, leaf, path="outputs"):
    """(path, traced tensor) of every traced tensor in the output, nested tuples, lists and dicts walked."""
    if isinstance(output, leaf):
        yield path, output
    elif isinstance(output, dict):
        for key, value in output.items():
            yield from _traced_leaves(value, leaf, f"{path}[{key!r}]")
    elif isinstance(output, (tuple, list)):
        for k, value in enumerate(output):
            yield from _traced_leaves(value, leaf, f"{path}[{k}]")


def _find_loss(output, shape, leaf=T):
    """The scalar the model (or the loss function) returns: itself; a dict's, a HuggingFace ModelOutput's or a
    named tuple's "loss"; else the only 0-d traced tensor among the outputs (`(logits, loss)`). None or
    several: a ValueError asking for loss=. leaf: the type of a traced tensor (the lowering's T; torch.Tensor
    for the outputs of the module that torch.export runs)."""
    named = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
    if isinstance(named, leaf) and shape(named) == []:
        return named
    scalars = [(path, t) for path, t in _traced_leaves(output, leaf) if shape(t) == []]
    if len(scalars) == 1:
        return scalars[0][1]
    if not scalars:
        raise ValueError("the traced model returns no scalar loss: return one (alone, as .loss, or the only scalar "
                         "of a tuple), or pass loss=lambda outputs, batch: ...")
    paths = ", ".join(path for path, _ in scalars)
    raise ValueError(f"the traced model returns {len(scalars)} scalars ({paths}), so which is the loss is not clear: "
                     f"pass loss=lambda outputs, batch: {scalars[0][0]} (or the one to train)")


def trace(module, example_inputs, *, concrete_args=None, leaf_modules=(), loss=None, batch_dim=0, capture="auto"):
    """Traces `module` on `example_inputs` into the engine's graph JSON (a dict; see save_graph).

    example_inputs: a tensor, a tuple (by position) or a dict (by argument name) of example tensors; the
      graph takes their shapes and dtypes (the batch and sequence sizes the plan is for).
    concrete_args: arguments fixed while tracing ({"use_cache": False}), so control flow on them resolves.
    leaf_modules: module types or instances kept whole (their call is one op: it must map to one).
    loss: None when the module returns the loss: a scalar, a dict or HuggingFace ModelOutput with "loss", or
      a tuple (or dict) whose only scalar is the loss, as `(logits, loss)`; several scalars are an error
      asking for loss=. Else loss(outputs, batch) -> scalar, traced into the graph (batch: the inputs by name).
    batch_dim: the dimension of the example tensors that is the batch (the first tensor's size there is the
      batch; every tensor with that size there grows with it). The module is traced a second time at
      batch + 1 and the sizes that moved are recorded in the graph's "sizes" section, so `loom plan --graph
      --global-batch N` plans it at any batch (docs/json.md). None: not recorded (the graph plans at its own
      batch only); a model whose sizes do not follow the batch linearly gets no section and a warning.
    capture: "fx" (torch.fx; HuggingFace's tracer for its models; every node run on the examples), "export"
      (torch.export at the ATen level on fake tensors: the newest transformers, and parameters on the meta
      device, whose elements are never read; docs/capture.md) or "auto": fx, and export where fx fails
      (transformers 5 has no torch.fx tracer; 4.5x's masks defeat it; a model on meta). leaf_modules and
      loom.register_op's functions kept whole are the fx route's.
    """
    if capture not in (*_CAPTURES, "auto"):
        raise ValueError(f"capture={capture!r}: choose one of {', '.join(map(repr, (*_CAPTURES, 'auto')))}")
    options = dict(concrete_args=concrete_args, leaf_modules=leaf_modules, loss=loss, batch_dim=batch_dim)
    if capture == "auto":
        if leaf_modules or _on_meta(module):
            return trace(module, example_inputs, **options, capture="fx" if leaf_modules else "export")
        try:
            return trace(module, example_inputs, **options, capture="fx")
        except Exception as fx_error:  # noqa: BLE001: any failure of fx is a reason to try export
            try:
                return trace(module, example_inputs, **options, capture="export")
            except Exception as export_error:
                if isinstance(fx_error, ImportError):  # no fx tracer at all (transformers 5): export's is the reason
                    raise export_error from None
                fx_error.add_note(f"capture='export' failed too: {type(export_error).__name__}: {export_error}")
                raise fx_error from None
    if capture == "export" and leaf_modules:
        raise ValueError("leaf_modules applies to capture='fx' (torch.export traces through every module)")
    inputs = fx_capture.named_inputs(module, example_inputs)
    trace_once = _CAPTURES[capture]
    batch = _batch_of(inputs, batch_dim)
    graph = trace_once(module, inputs, concrete_args, leaf_modules, loss, batch)
    if batch is None:
        return graph
    grown = {name: _grow_batch(value, batch_dim, batch) for name, value in inputs.items()}
    try:
        other = trace_once(module, grown, concrete_args, leaf_modules, loss, batch + 1)
        sizes = batch_sizes(graph, other, batch, batch + 1)
    except Exception as e:  # any failure at the other batch only costs the resizing
        warnings.warn(f"loom.trace: the graph records no batch sizes (it plans at batch {batch} only): traced at "
                      f"batch {batch + 1}, {e}", stacklevel=2)
        return graph
    return {**graph, "sizes": sizes}


def _on_meta(module):
    return any(p.device.type == "meta" for p in module.parameters())


def _batch_of(inputs, batch_dim):
    """The first example tensor's size at `batch_dim`; None when not recorded."""
    if batch_dim is None:
        return None
    for value in inputs.values():
        if isinstance(value, torch.Tensor) and value.dim() > batch_dim:
            return int(value.shape[batch_dim])
    return None


def _grow_batch(value, batch_dim, batch):
    """An example tensor with batch + 1 samples (its first repeated); anything else as it is."""
    if isinstance(value, torch.Tensor) and value.dim() > batch_dim and value.shape[batch_dim] == batch:
        return torch.cat([value, value.narrow(batch_dim, 0, 1)], dim=batch_dim)
    return value


def _trace_once(module, inputs, concrete_args, leaf_modules, loss, batch):
    gm, fixed, aliases = fx_capture.trace_module(module, inputs, concrete_args, tuple(leaf_modules))
    if loss is not None:
        gm = fx_capture.append_loss(gm, loss, inputs, aliases)
    # The recording run executes the module: training-mode batch norms update their running statistics in
    # place. Tracing must not change the model, and the graph starts from the statistics as they were.
    buffers = {id(b): (b, b.detach().clone()) for b in module.buffers()}
    values = fx_capture.record_values(gm, {**fixed, **inputs}, aliases)
    with torch.no_grad():
        for b, before in buffers.values():
            b.copy_(before)
    return _lower(module, gm, values, inputs, aliases, lowering.FUNCTIONS, batch)


def _export_once(module, inputs, concrete_args, leaf_modules, loss, batch):
    find_loss = lambda outputs: _find_loss(outputs, lambda t: list(t.shape), torch.Tensor)  # noqa: E731
    gm, values, aliases, updated = export_capture.capture(module, inputs, concrete_args, loss, find_loss)
    return _lower(module, gm, values, inputs, aliases, lowering.ATEN, batch, updated)


def _lower(module, gm, values, inputs, aliases, functions, batch, updated=None):
    """The graph JSON of a captured GraphModule whose every node has a value (concrete, or meta where only
    its shape and dtype are known); parameters and buffers named by their module paths. batch: the examples'
    batch (None: not recorded). updated: per output, the buffer it is the next value of, or None for the
    module's outputs (export's buffer mutations)."""
    names = {}
    for path, p in module.named_parameters():
        names.setdefault(id(p), path)
    buffer_names = {}
    for path, b in module.named_buffers():
        buffer_names.setdefault(id(b), path)
    state = [b for b in updated or () if b is not None]
    lowering_ = Lowering(gm, values, names, type(module).__name__, buffer_names, functions, state, batch)
    output = lowering_.run(inputs, aliases)
    if state:
        for new, buffer in zip(output, updated):
            if buffer is not None:
                lowering_.updates_buffer(new, buffer)
        output = tuple(out for out, buffer in zip(output, updated) if buffer is None)
    if lowering_.unsupported:
        raise UnsupportedOpsError(lowering_.unsupported)
    loss_tensor = _find_loss(output, lowering_.shape)
    fused_projection.split_fused_projections(lowering_.graph)
    return custom_ops.attach_definitions(lowering_.graph.finish(loss_tensor))  # loom.register_op's definitions


_CAPTURES = {"fx": _trace_once, "export": _export_once}

