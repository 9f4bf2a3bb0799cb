"""loom.plan and loom.parallelize: the engine through its Python bindings (the `_loom_engine` extension,
src/bindings), and a module's rank program run in this process (docs/python_api.md).

    model = loom.parallelize(model, {"input_ids": ids, "labels": ids}, policy="megatron", dp=2, tp=2)
    for batch in batches:                      # under `loom run train.py --nproc 4` (torchrun)
        loss = model.train_step(batch)         # one optimizer step on this rank; the same loss on every rank

Planning is the engine's: parallelize traces the module (loom.trace), has the engine plan and emit the rank
programs (in memory), and runs this rank's program with the runtime (loom.runtime), starting from the
module's own weights. Nothing here decides a plan.
"""

import difflib
import inspect
import json
import linecache
import types

import torch

from .tracer import trace

try:
    import _loom_engine
    from _loom_engine import PlanError
except ImportError as _missing:  # the extension is not built (or not on the path): plan() says how to fix it
    _loom_engine = None
    _IMPORT_ERROR = _missing

    class PlanError(RuntimeError):
        """An error of the engine: the message names the input and, on a line "hint: ...", the fix."""


def _engine():
    if _loom_engine is None:
        raise ImportError("loom's engine extension (_loom_engine) is not importable: build it with `make build` (which "
                          "also writes .venv's loom.pth), or run the script with `loom run`") from _IMPORT_ERROR
    return _loom_engine


def plan(model=None, graph=None, *, graph_file=None, policy="megatron", cluster="dgx-a100", **options):
    """Plans, checks and simulates a job; returns the engine's PlanResult (description, step_time, mfu,
    peak_memory per device, out_of_memory, summary(), emit(), verify(), write_files(dir), write_programs(dir)).

    policy: a built-in policy's name, or a Python function policy(plan, resource) that builds the plan with
    the primitives (loom.policy); the engine resolves the degrees for it as for megatron (resource.config)
    and checks, materializes and simulates what it builds.

    model: a preset name (`loom models`); graph: a traced graph (loom.trace's dict, or its JSON text);
    graph_file: a graph JSON file. options: the engine's request fields (dp, tp, pp, micro_batches, zero,
    recompute, sequence_parallel, gpus, batch, seq, layers, dtype, shrink, optimizer, lr, beta1, beta2, eps,
    weight_decay, fold, ...), their defaults the engine's, passed on unchanged (the engine refuses a keyword it
    does not know). Raises PlanError with the engine's message."""
    if isinstance(graph, dict):
        graph = json.dumps(graph, separators=(",", ":"))
    if callable(policy):
        name = "python:" + getattr(policy, "__name__", type(policy).__name__)
        return _engine().plan_with_policy(policy, name, model=model or "", graph=graph or "",
                                          graph_file=str(graph_file or ""), cluster=cluster, **options)
    return _engine().plan(model=model or "", graph=graph or "", graph_file=str(graph_file or ""), policy=policy,
                          cluster=cluster, **options)


_OPTIMIZER_KEYS = {"lr": "lr", "eps": "eps", "weight_decay": "weight_decay", "momentum": "momentum",
                   "kind": "optimizer", "master_weights": "master_weights"}


def _optimizer_options(optimizer):
    """parallelize's optimizer dict (torch.optim's names: lr, betas, eps, weight_decay; kind: adamw, adam or
    sgd) as the engine's request fields; left out, the engine's defaults."""
    out = {}
    for key, value in (optimizer or {}).items():
        if key == "betas":
            out["beta1"], out["beta2"] = (float(b) for b in value)
        elif key in _OPTIMIZER_KEYS:
            out[_OPTIMIZER_KEYS[key]] = value
        else:
            raise TypeError(f"optimizer: unknown key '{key}' (known: betas, {', '.join(sorted(_OPTIMIZER_KEYS))})")
    return out


def _world():
    """(rank, world size) of the initialized default process group, else (0, 1)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def parallelize(model, example_inputs, policy="megatron", world_size=None, cluster="dgx-a100", *, dp=None, tp=None,
                pp=None, microbatches=None, zero=0, recompute="none", optimizer=None, loss=None, **plan_options):
    """A ParallelModule: this rank's part of `model` trained under the engine's plan of it.

    example_inputs: one batch as `model` takes it (a dict by argument name, as loom.trace); the plan is for
    its shapes. The world size is torch.distributed's (initialized, e.g. by `loom run` / torchrun and
    init_process_group), or 1 without a process group. Degrees: none given, the policy's defaults on the world
    (the CLI's: megatron puts up to 8 on tp, dp the rest; dp, tp and pp all on theirs); given, the missing
    ones are 1 and their product must be the world size. microbatches: default 1, or 2 x pp when pipelined.
    optimizer: dict(lr=, betas=, eps=, weight_decay=) as torch.optim.AdamW's (defaults: the engine's).
    loss: None when the model returns its loss (a scalar, a dict or ModelOutput with .loss, or a tuple whose
    only scalar is the loss, as `(logits, loss)`); else loss(outputs, batch) -> scalar, traced with the model
    (batch: example_inputs by name, so it may hold what only the loss reads, as labels).
    plan_options: further engine request fields (sequence_parallel, schedule, ...), passed on unchanged (the
    engine rejects those it does not know); a misspelling of parallelize's own keywords is a TypeError here,
    before the trace."""
    rank, world = _world()
    if world_size is not None and world_size != world:
        raise ValueError(f"world_size={world_size}, but torch.distributed has {world} process(es): initialize the "
                         f"process group first (torch.distributed.init_process_group under `loom run --nproc "
                         f"{world_size}`)" if world == 1 else f"world_size={world_size}, but torch.distributed's "
                         f"world has {world} processes")
    if (dp, tp, pp) == (None, None, None):
        degrees = {"gpus": world}  # the engine's defaults for the policy (policy::default_degrees)
    else:
        dp, tp, pp = dp or 1, tp or 1, pp or 1
        if dp * tp * pp != world:
            raise ValueError(f"dp {dp} x tp {tp} x pp {pp} is {dp * tp * pp} devices, but this job has {world} "
                             f"process(es): give degrees whose product is the world size, or none")
        degrees = {"dp": dp, "tp": tp, "pp": pp, "gpus": world}
    request = {**degrees, "micro_batches": microbatches, "zero": zero, "recompute": recompute, "fold": "off",
               **_optimizer_options(optimizer)}
    _check_passed_on(plan_options, request)
    graph = _broadcast(lambda: trace(model, example_inputs, loss=loss), world)
    result = plan(graph=graph, policy=policy, cluster=cluster, **request, **plan_options)
    return ParallelModule(model, result, rank, world)


# Engine fields parallelize fills itself, and what a caller gives instead.
_FILLED = {"micro_batches": "give microbatches=", "gpus": "the world size is torch.distributed's",
           "fold": "parallelize plans unfolded: every rank runs its own program",
           **{key: "parallelize traces `model`; loom.plan plans a preset or a graph"
              for key in ("graph", "graph_file")}}


def _check_passed_on(options, request):
    """Refuses, before the trace, a keyword parallelize would pass on to the engine that misspells one of its
    own (microbatch for microbatches) or names a field it fills (micro_batches, an optimizer field given in
    `optimizer` too). The rest goes to the engine as it is: the engine knows its fields, not this module."""
    for key in options:
        if key in _FILLED:
            raise TypeError(f"parallelize() sets the engine's '{key}' itself: {_FILLED[key]}")
        if key in request:  # an optimizer field (lr, eps, ...) given in optimizer= as well
            raise TypeError(f"parallelize() got '{key}' twice, as a keyword and in optimizer=: give it once")
        close = difflib.get_close_matches(key, _PARALLELIZE_KEYWORDS, n=1, cutoff=0.8)
        if close:
            raise TypeError(f"parallelize() got an unexpected keyword argument '{key}'; did you mean '{close[0]}'?")


_PARALLELIZE_KEYWORDS = [name for name, p in inspect.signature(parallelize).parameters.items()
                         if p.kind is not p.VAR_KEYWORD]


def _broadcast(make, world):
    """make() on rank 0, its value sent to every rank (tracing takes seconds; each rank plans the same graph)."""
    if world == 1:
        return make()
    import torch.distributed as dist

    failure = None
    box = [None]
    if dist.get_rank() == 0:
        try:
            box = [("value", make())]
        except Exception as e:  # noqa: BLE001 (every rank must leave the broadcast, then raise)
            failure, box = e, [("error", f"{type(e).__name__}: {e}")]
    dist.broadcast_object_list(box, src=0)
    if failure is not None:
        raise failure
    kind, value = box[0]
    if kind == "error":
        raise RuntimeError(f"rank 0 failed to trace the model: {value}")
    return value


def _rank0_state(state, world):
    """Rank 0's module weights on every rank, as DistributedDataParallel starts (ranks may have drawn others)."""
    if world > 1:
        import torch.distributed as dist

        for name in sorted(state):
            dist.broadcast(state[name], src=0)
    return state


def _load_program(text, rank):
    """The rank's generated module, compiled from its text (shown in tracebacks under its own name)."""
    filename = f"<loom rank_{rank}.py>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    module = types.ModuleType(f"loom_rank_{rank}")
    exec(compile(text, filename, "exec"), module.__dict__)  # noqa: S102 (the engine's generated program)
    return module


def default_group_timeout(device):
    """The timeout the user gave init_process_group (a datetime.timedelta), or None. The plan's own groups
    take it: torch's new_group would otherwise give each of them its 30-minute default, so a rank that
    stopped would be reported only half an hour later."""
    import torch.distributed as dist

    try:
        return dist.distributed_c10d._get_default_group()._get_backend(device).options._timeout
    except (AttributeError, RuntimeError, ValueError):  # no default group, or a backend without options
        return None


class ParallelModule:
    """This rank's program of a plan, with the runtime that runs it (loom.runtime.Runtime)."""

    def __init__(self, model, result, rank, world):
        from .runtime.comm import Communicator
        from .runtime.initial import module_state
        from .runtime.runtime import Runtime

        self.plan = result
        self.rank, self.world_size = rank, world
        programs = result.emit()
        self.manifest = json.loads(programs["manifest"])
        self._program = _load_program(programs["modules"][rank], rank)
        self._model = model
        first = next(iter(model.parameters()), None)
        device = torch.device("cpu") if first is None or first.device.type == "cpu" else first.device
        comm = (Communicator(rank, world, self.manifest["groups"], device, timeout=default_group_timeout(device))
                if world > 1 else None)
        self._initial = _rank0_state(module_state(model, self.manifest), world)
        self._runtime = Runtime(self.manifest, rank, comm=comm, device=device, initial=self._initial)
        self._inputs = sorted(n for n, e in self.manifest["tensors"].items()  # derived ones: the runtime's to count
                              if e.get("role") == "input" and e.get("init") != "derived")
        self.steps = 0

    def __repr__(self):
        return f"ParallelModule(rank {self.rank} of {self.world_size}: {self.plan.description})"

    def train_step(self, batch):
        """One optimizer step of the plan on this rank with `batch` (the whole global batch, by input name, the
        same on every rank); returns the step's loss (before the update), the same float on every rank."""
        missing = [name for name in self._inputs if name not in batch]
        if missing:
            raise ValueError(f"train_step: the batch lacks the plan's inputs {missing} (it has {sorted(batch)})")
        rt = self._runtime
        if self.steps:
            rt.next_step()
        rt.set_batch({name: batch[name] for name in self._inputs})
        self._program.step(rt)
        rt.finish()
        self.steps += 1
        loss = self.manifest["loss"]
        return float(self._gathered(lambda name: name == loss)[loss])

    def state_dict(self):
        """The module's state_dict with every planned parameter (and every buffer the step updates: batch norm's
        running statistics) at its current (trained) value, gathered whole
        on every rank (a collective: call it on all ranks). Unplanned entries keep the module's values."""
        tensors = self.manifest["tensors"]
        if self.steps:  # trained parameters, and buffers the step updates (batch norm's running statistics)
            updated = {n: e["updates"] for n, e in tensors.items()
                       if tensors.get(e.get("updates"), {}).get("role") in ("parameter", "buffer")}
            whole = {updated[n]: v for n, v in self._gathered(lambda name: name in updated).items()}
        else:
            whole = self._initial
        out = {}
        for name, value in self._model.state_dict(keep_vars=True).items():
            source = self._parameter_name(value)
            if source in whole:
                out[name] = whole[source].reshape(value.shape).to(value.dtype).to(value.device)
            else:
                out[name] = value.detach().clone()
        return out

    def _parameter_name(self, value):
        """The manifest name of a module tensor: its first qualified parameter (or buffer) name (tied weights
        share one)."""
        if not hasattr(self, "_names"):
            self._names = {}
            for name, p in [*self._model.named_parameters(), *self._model.named_buffers()]:
                self._names.setdefault(id(p), name)
        return self._names.get(id(value))

    def _gathered(self, wanted):
        """{tensor name: whole value} of the last step's kept pieces whose name is wanted, from every rank."""
        from .runtime import results
        from .runtime.runtime import on_cpu

        mine = on_cpu(k for k in self._runtime.kept if wanted(k[0]))
        if self.world_size > 1:
            import torch.distributed as dist

            everyone = [None] * self.world_size
            dist.all_gather_object(everyone, mine)
            mine = [triple for part in everyone for triple in part]
        return results.assemble(self.manifest, mine)
