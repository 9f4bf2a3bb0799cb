"""Capturing a module as a torch.fx graph, with the loss, and the concrete value of every node.

Control flow is resolved on the example inputs: concrete_args fix the arguments that steer it, and
every node's value is recorded by running the graph once on the examples (shape propagation that also
keeps sizes, dtypes and other non-tensor values, so `x.size(-1)` becomes a number).
"""

import contextlib
import copy
import inspect
import operator

import torch
import torch.fx as fx

from . import custom_ops


def _is_huggingface(module):
    try:
        from transformers import PreTrainedModel
    except ImportError:
        return False
    return isinstance(module, PreTrainedModel)


class _LeafTracer(fx.Tracer):
    """torch.fx's tracer with user-chosen leaf module types or instances."""

    def __init__(self, leaf_modules):
        super().__init__(autowrap_functions=custom_ops.leaf_functions())  # loom.register_op: calls kept whole
        self._leaf_types = tuple(m for m in leaf_modules if isinstance(m, type))
        self._leaf_ids = {id(m) for m in leaf_modules if not isinstance(m, type)}

    def is_leaf_module(self, m, qualname):
        if id(m) in self._leaf_ids or (self._leaf_types and isinstance(m, self._leaf_types)):
            return True
        return super().is_leaf_module(m, qualname)

    def proxy(self, node):
        return _WritableProxy(node, self)

    def call_module(self, m, forward, args, kwargs):
        if _is_identity(m, args, kwargs):
            return args[0]
        return super().call_module(m, forward, args, kwargs)


def _is_identity(module, args, kwargs):
    """nn.Identity on one argument: traced as that argument itself (no node), so `Identity()(None) is not
    None` stays False (Perceiver's self-attention tests the normalized cross input against None)."""
    return type(module) is torch.nn.Identity and len(args) == 1 and not kwargs


class _WritableProxy(fx.Proxy):
    """x[i] = v recorded as a call of operator.setitem (as HuggingFace's proxies do; lowering writes it
    functionally, tracer_writes.py)."""

    def __setitem__(self, index, value):
        return self.tracer.create_proxy("call_function", operator.setitem, (self, index, value), {})


def _concrete_hf_tracer():
    """HuggingFace's tracer whose proxies act as their values where its meta-tensor run knows them: sizes
    (and numbers computed from sizes) iterate, index, convert to int and decide `if`s, so control flow on
    shapes resolves on the examples. Data-dependent values (meta tensors, no values) are still refused."""
    from torch.fx.proxy import TraceError
    from transformers.utils.fx import HFProxy, HFTracer

    def known(proxy):
        meta = proxy.__dict__.get("_metadata")
        return meta if isinstance(meta, (bool, int, float, tuple, list, torch.Size)) else None

    class ConcreteProxy(HFProxy):
        def __iter__(self):
            meta = known(self)
            if isinstance(meta, (tuple, list, torch.Size)):
                return iter([self[i] for i in range(len(meta))])
            if isinstance(self.__dict__.get("_metadata"), torch.Tensor):
                return super().__iter__()  # a tensor of known shape: HuggingFace's iteration over dim 0
            raise TraceError(f"{self.node.name} ({_node_target(self.node)}) is iterated, and its length is not known "
                             "from the example shapes: a data-dependent size (torch.where's indices, a routing "
                             "mask's nonzeros), or a value computed from one")

        def __bool__(self):
            meta = self.__dict__.get("_metadata")
            if isinstance(meta, torch.Tensor) and meta.device.type != "meta" and meta.numel() == 1:
                return bool(meta)
            if known(self) is None:
                raise TraceError(f"a traced value decides control flow at {self.node.name}, and the examples do "
                                 "not fix it: pass the argument that steers it in concrete_args")
            return bool(known(self))

        def __index__(self):
            if isinstance(known(self), int) and not isinstance(known(self), bool):
                return known(self)
            raise TypeError(f"{self.node.name} is used as an integer, and the examples do not fix its value")

        def __int__(self):  # int(size ** 0.5) truncates, as Python does (transformers' torch_float)
            if isinstance(known(self), (int, float)):
                return int(known(self))
            raise TypeError(f"{self.node.name} is used as a number, and the examples do not fix its value")

        def __float__(self):
            if isinstance(known(self), (int, float)):
                return float(known(self))
            raise TypeError(f"{self.node.name} is used as a number, and the examples do not fix its value")

        def __array__(self, dtype=None, copy=None):
            """numpy on a number known from shapes (CTRL's np.sqrt(k.shape[-1])): that number's array."""
            import numpy
            meta = known(self)
            if isinstance(meta, (int, float, tuple, list, torch.Size)) and not isinstance(meta, bool):
                return numpy.asarray(meta, dtype=dtype)  # sizes too: Perceiver's np.prod(index_dims)
            raise TypeError(f"{self.node.name} is used as a numpy value, and the examples do not fix it")

    class ConcreteHFTracer(HFTracer):
        def __init__(self, *args, **kwargs):  # loom.register_op: calls to registered functions kept whole
            super().__init__(*args, autowrap_functions=custom_ops.leaf_functions(), **kwargs)

        def proxy(self, node):
            return ConcreteProxy(node, self)

        def create_arg(self, a):
            import numpy
            if isinstance(a, numpy.generic):  # a numpy number among an op's arguments (Perceiver's sizes)
                return super().create_arg(a.item())  # the same value as a Python number, which fx records
            return super().create_arg(a)

        def is_leaf_module(self, m, qualname):
            # A top-k mixture of experts routes with data-dependent sizes: traced whole, lowered densely.
            return _moe_leaf(m) or super().is_leaf_module(m, qualname)

        def call_module(self, m, forward, args, kwargs):
            if _is_identity(m, args, kwargs):
                return args[0]
            out = super().call_module(m, forward, args, kwargs)
            meta = out.__dict__.get("_metadata") if isinstance(out, fx.Proxy) else None
            if _moe_leaf(m) and isinstance(meta, tuple):  # (hidden states, router logits): a real tuple, as
                return tuple(out[i] for i in range(len(meta)))  # callers test isinstance(output, tuple)
            return out

        @contextlib.contextmanager
        def patch_for_tracing(self, root):
            """HuggingFace's patches (torch.clamp, torch.arange, ... and its cache classes), undone also when
            the trace fails: its own context manager restores them only on a normal exit, so a failed trace
            left them patched for every later trace in the process (whose lowering then missed torch.clamp)."""
            patches = super().patch_for_tracing(root)
            patches.__enter__()
            try:
                yield
            finally:
                patches.__exit__(None, None, None)  # the normal exit path: the one that restores

        def create_proxy(self, kind, target, args, kwargs, *rest, **named):
            import numpy  # numpy numbers as Python's (Perceiver's heads' widths): torch.Size + (np.int64,) fails
            def plain(v):
                if isinstance(v, numpy.generic):
                    return v.item()
                if type(v) in (tuple, list):
                    return type(v)(plain(x) for x in v)
                return {k: plain(x) for k, x in v.items()} if type(v) is dict else v
            args, kwargs = plain(args), plain(kwargs)
            rv = super().create_proxy(kind, target, args, kwargs, *rest, **named)
            if kind in ("call_function", "call_method", "call_module") and isinstance(rv, HFProxy) \
                    and ("_metadata" not in rv.__dict__ or _default_dtype_meta(rv, args, kwargs)):
                meta = self._fallback_metadata(kind, target, args, kwargs)
                if meta is not None:
                    rv.install_metadata(meta)
            return rv

        def _fallback_metadata(self, kind, target, args, kwargs):
            """Where HuggingFace's meta run gives up (a module whose weights are not on the meta device,
            an override that refuses plain relu), the op itself on meta tensors: modules moved to meta."""
            metas = fx.node.map_aggregate((args, kwargs), lambda v: v.__dict__.get("_metadata", v)
                                          if isinstance(v, fx.Proxy) else v)
            if any(isinstance(v, fx.Proxy) for v in _flatten(metas)):
                return None
            # A real tensor (a buffer read through get_attr) beside meta ones: torch refuses to mix devices.
            meta_args, meta_kwargs = fx.node.map_aggregate(metas, lambda v: v.to("meta") if isinstance(
                v, torch.Tensor) and v.device.type != "meta" else v)
            self._disable_module_getattr = self._disable_call_module = True
            try:
                if kind == "call_function":
                    out = target(*meta_args, **meta_kwargs)
                elif kind == "call_method":
                    out = getattr(meta_args[0], target)(*meta_args[1:], **meta_kwargs)
                else:
                    module = self.root.get_submodule(target)
                    if _moe_leaf(module):  # data-dependent sizes inside, not in its outputs: shapes from zeros
                        real = fx.node.map_aggregate((meta_args, meta_kwargs), lambda v: torch.zeros(
                            v.shape, dtype=v.dtype) if isinstance(v, torch.Tensor) else v)
                        with torch.no_grad():
                            out = module(*real[0], **real[1])
                        return fx.node.map_aggregate(out, lambda v: v.to("meta") if isinstance(v, torch.Tensor) else v)
                    modules = self.__dict__.setdefault("_meta_modules", {})
                    if target not in modules:
                        modules[target] = copy.deepcopy(module).to("meta")
                    out = modules[target](*meta_args, **meta_kwargs)
                return out.to("meta") if isinstance(out, torch.Tensor) else out
            except Exception:  # noqa: BLE001: no metadata, as HuggingFace's own run
                return None
            finally:
                self._disable_module_getattr = self._disable_call_module = False

    return ConcreteHFTracer


def _default_dtype_meta(proxy, args, kwargs):
    """HuggingFace's meta overrides (conv, linear, layer norm, ...) make their results in the default
    dtype: a float64 model's conv output would read as float32, and a later matmul of float64 and float32
    metas fails (LeViT in float64). True when the result is a floating tensor of a dtype that no floating
    input has: its metadata is computed again by running the op on meta tensors."""
    meta = proxy.__dict__.get("_metadata")
    if not isinstance(meta, torch.Tensor) or not meta.dtype.is_floating_point:
        return False
    inputs = [v.__dict__.get("_metadata") for v in _flatten((args, kwargs)) if isinstance(v, fx.Proxy)]
    floating = {v.dtype for v in inputs if isinstance(v, torch.Tensor) and v.dtype.is_floating_point}
    return bool(floating) and meta.dtype not in floating


def _moe_leaf(module):
    from .lowering import is_dense_moe
    return is_dense_moe(module)


def _node_target(node):
    target = node.target
    return target if isinstance(target, str) else getattr(target, "__name__", str(target))


def _flatten(value):
    if isinstance(value, (tuple, list)):
        return [x for v in value for x in _flatten(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flatten(v)]
    return [value]


def named_inputs(module, example_inputs):
    """example_inputs as {forward argument name: value}: a dict as is, a tensor or a tuple by position."""
    if isinstance(example_inputs, dict):
        return dict(example_inputs)
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    names = [p for p in inspect.signature(module.forward).parameters
             if inspect.signature(module.forward).parameters[p].kind in
             (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    if len(example_inputs) > len(names):
        raise TypeError(f"{type(module).__name__}.forward takes {len(names)} positional arguments, "
                        f"got {len(example_inputs)} example inputs")
    return dict(zip(names, example_inputs))


def _trace_huggingface(module, inputs):
    """HuggingFace's tracer (its patches, its leaves) on the example inputs themselves, as meta tensors: its
    own symbolic_trace draws random batch and sequence sizes, so numbers the trace fixes (a size turned into
    an int, a loop's length) would be another batch's; here every known size is the examples'. The check of
    HuggingFace's list of tested classes is left out: others often trace too, and those that do not fail
    with the reason."""
    from transformers.utils.fx import get_concrete_args
    taken = inspect.signature(module.forward).parameters
    names = [name for name in inputs if name in taken]
    if getattr(module.config, "use_cache", False):
        module.config.use_cache = False  # as symbolic_trace: no cache, whose objects are not traced
    tracer = _concrete_hf_tracer()()
    graph = tracer.trace(module, concrete_args=get_concrete_args(module, names),
                         dummy_inputs={name: inputs[name] for name in names},
                         complete_concrete_args_with_inputs_not_in_dummy_inputs=False)  # get_concrete_args did
    traced = fx.GraphModule(module, graph)
    traced.config = module.config
    return traced


def trace_module(module, inputs, concrete_args, leaf_modules):
    """A GraphModule of `module` (HuggingFace's tracer for its models, torch.fx's otherwise), the
    arguments fixed while tracing, and {placeholder target: forward argument name} where they differ
    (torch.fx renames the placeholders of concrete arguments, e.g. `double_1`)."""
    if _is_huggingface(module):
        if leaf_modules:
            raise ValueError("leaf_modules is not supported for HuggingFace models (their tracer picks the leaves)")
        return _trace_huggingface(module, inputs), {}, {}
    fixed = dict(concrete_args or {})
    params = inspect.signature(module.forward).parameters
    # Arguments the examples do not give are fixed to their defaults, so control flow on them resolves.
    for name, p in params.items():
        if name not in inputs and name not in fixed and p.default is not inspect.Parameter.empty \
                and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            fixed[name] = p.default
    tracer = _LeafTracer(leaf_modules)
    graph = tracer.trace(module, concrete_args=fixed or None)
    # One placeholder per argument, in order.
    arguments = [name for name, p in params.items()
                 if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    placeholders = [n.target for n in graph.nodes if n.op == "placeholder"]
    aliases = dict(zip(placeholders, arguments)) if len(placeholders) == len(arguments) else {}
    return fx.GraphModule(tracer.root, graph, type(module).__name__), fixed, aliases


class _Outputs(dict):
    """A traced dict output (HuggingFace's ModelOutput) read by key or attribute in a loss function."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


def append_loss(gm, loss, inputs, aliases):
    """A GraphModule computing loss(model outputs, batch), the loss function traced into the graph.
    batch holds every example input by name, also those only the loss reads (labels)."""
    tracer = fx.Tracer()
    tracer.root = gm
    graph = fx.Graph(tracer_cls=fx.Tracer)
    tracer.graph = graph
    env = {}
    outputs = graph.graph_copy(gm.graph, env, return_output_node=False)
    as_proxy = lambda n: fx.Proxy(n, tracer)  # noqa: E731
    batch = {aliases.get(n.target, n.target): as_proxy(env[n]) for n in gm.graph.nodes if n.op == "placeholder"}
    # After the model's own placeholders, so the graph's inputs keep the model's order.
    last = [n for n in graph.nodes if n.op == "placeholder"][-1:] or [next(iter(graph.nodes))]
    for name in inputs:
        if name not in batch:
            with (graph.inserting_after(last[0]) if last[0].op == "placeholder" else graph.inserting_before(last[0])):
                last[0] = graph.placeholder(name)
            batch[name] = as_proxy(last[0])
    outputs = fx.node.map_arg(outputs, as_proxy)
    if isinstance(outputs, dict):
        outputs = _Outputs(outputs)
    value = loss(outputs, batch)
    graph.output(tracer.create_arg(value))
    return fx.GraphModule(gm, graph, gm.__class__.__name__)


class _Recorder(fx.Interpreter):
    """Runs the graph once, keeping every node's value; placeholders are fed by name."""

    def __init__(self, gm, inputs, aliases):
        super().__init__(gm)
        self.inputs = inputs
        self.aliases = aliases
        self.values = {}

    def placeholder(self, target, args, kwargs):
        name = self.aliases.get(target, target)
        if name in self.inputs:
            return self.inputs[name]
        if args:  # a default
            return args[0]
        return None

    def run_node(self, n):
        value = super().run_node(n)
        self.values[n] = value
        return value


def record_values(gm, inputs, aliases):
    recorder = _Recorder(gm, inputs, aliases)
    with torch.no_grad():
        recorder.run()
    return recorder.values
