"""Capturing a module as a torch.fx graph, with the loss, and the concrete value of every node.

Control flow is resolved on the example inputs: concrete_args fix the arguments that steer it, and
every node's value is recorded by running the graph once on the examples (shape propagation that also
keeps sizes, dtypes and other non-tensor values, so `x.size(-1)` becomes a number).
"""

import contextlib
import copy
import inspect

import torch
import torch.fx as fx


def _is_huggingface(module):
    try:
        from transformers import PreTrainedModel
    except ImportError:
        return False
    return isinstance(module, PreTrainedModel)


class _LeafTracer(fx.Tracer):
    """torch.fx's tracer with user-chosen leaf module types or instances."""

    def __init__(self, leaf_modules):
        super().__init__()
        self._leaf_types = tuple(m for m in leaf_modules if isinstance(m, type))
        self._leaf_ids = {id(m) for m in leaf_modules if not isinstance(m, type)}

    def is_leaf_module(self, m, qualname):
        if id(m) in self._leaf_ids or (self._leaf_types and isinstance(m, self._leaf_types)):
            return True
        return super().is_leaf_module(m, qualname)


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
            return super().__iter__()

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

        __int__ = __index__

    class ConcreteHFTracer(HFTracer):
        def proxy(self, node):
            return ConcreteProxy(node, self)

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
            rv = super().create_proxy(kind, target, args, kwargs, *rest, **named)
            if kind in ("call_function", "call_method", "call_module") and isinstance(rv, HFProxy) \
                    and "_metadata" not in rv.__dict__:
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
            meta_args, meta_kwargs = metas
            self._disable_module_getattr = self._disable_call_module = True
            try:
                if kind == "call_function":
                    out = target(*meta_args, **meta_kwargs)
                elif kind == "call_method":
                    out = getattr(meta_args[0], target)(*meta_args[1:], **meta_kwargs)
                else:
                    modules = self.__dict__.setdefault("_meta_modules", {})
                    if target not in modules:
                        modules[target] = copy.deepcopy(self.root.get_submodule(target)).to("meta")
                    out = modules[target](*meta_args, **meta_kwargs)
                return out.to("meta") if isinstance(out, torch.Tensor) else out
            except Exception:  # noqa: BLE001: no metadata, as HuggingFace's own run
                return None
            finally:
                self._disable_module_getattr = self._disable_call_module = False

    return ConcreteHFTracer


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


def trace_module(module, inputs, concrete_args, leaf_modules):
    """A GraphModule of `module` (HuggingFace's tracer for its models, torch.fx's otherwise), the
    arguments fixed while tracing, and {placeholder target: forward argument name} where they differ
    (torch.fx renames the placeholders of concrete arguments, e.g. `double_1`)."""
    if _is_huggingface(module):
        from transformers.utils.fx import symbolic_trace
        if leaf_modules:
            raise ValueError("leaf_modules is not supported for HuggingFace models (their tracer picks the leaves)")
        taken = inspect.signature(module.forward).parameters
        # disable_check: HuggingFace lists the classes it tested its tracer on; others often trace too,
        # and those that do not fail with the reason.
        return symbolic_trace(module, input_names=[name for name in inputs if name in taken], disable_check=True,
                              tracer_cls=_concrete_hf_tracer()), {}, {}
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
