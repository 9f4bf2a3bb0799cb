"""The lowering walk: every node of a captured graph, in order, to registry ops (lowering/ holds the handler
tables). A node whose value depends on an input or a parameter is lowered; one that does not (sizes, dtypes,
positions, masks made of constants) is folded: numbers stay numbers, tensors become "buffer" tensors when an op
reads them. Unsupported ops are collected, so one error lists them all."""

import operator
from collections import OrderedDict

import torch
import torch.fx as fx
import torch.nn as nn

from . import lowering, tracer_writes
from .graph_json import GraphBuilder, dtype_name
from .lowering import T
from .tracer_names import _scope, _target_name, _Unsupported

_Meta = lowering.Meta
# x.type_as(y), as torch.fx and torch.export write it: reads y's dtype only
_TYPE_AS = {("call_method", "type_as"), ("call_function", torch.ops.aten.type_as.default)}


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
        op computing it wrote the update itself (batch norm's running statistics, lowering/vision.py)."""
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
        read = (args[:1], kwargs) if (node.op, node.target) in _TYPE_AS else (args, kwargs)
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
        """x with x[index] = v, as a new value (tracer_writes.py); None where not lowered."""
        return tracer_writes.write(self, x, index, v)

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

