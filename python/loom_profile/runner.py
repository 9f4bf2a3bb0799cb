"""Running a request file: random inputs per request, the forward or backward timed, results collected.

A backward request is timed through autograd: the forward instance runs once with gradients enabled on
the inputs the engine's backward op produces gradients for, then torch.autograd.grad over the outputs
whose gradients the backward op reads is timed alone (retain_graph=True keeps the graph between calls),
so the time is the backward's own, not fwd+bwd minus fwd with the noise of both. Gradients come back
contiguous, as the engine's backward op writes them.

Anything that fails for one request (no torch form, out of memory, a torch error) lists that request as
unsupported with the reason; the others still run.
"""

import contextlib

import torch

from . import ops
from .timing import Timing, TimingOptions, measure, measure_cuda_graph

DTYPES = {
    "f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
    "i64": torch.int64, "i32": torch.int32, "i8": torch.int8, "u8": torch.uint8, "bool": torch.bool,
}


OUT_OF_MEMORY = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError


class BadRequest(Exception):
    """The request file is malformed; the message names the request and the field."""


def _specs(entry, field, where):
    specs = entry.get(field)
    if not isinstance(specs, list):
        raise BadRequest(f"{where}: \"{field}\" must be a list of {{shape, dtype}}")
    out = []
    for i, spec in enumerate(specs):
        dtype = DTYPES.get(spec.get("dtype")) if isinstance(spec, dict) else None
        shape = spec.get("shape") if isinstance(spec, dict) else None
        if dtype is None or not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise BadRequest(f"{where}: {field}[{i}] needs a shape of sizes and a dtype of {sorted(DTYPES)}")
        out.append((tuple(shape), dtype))
    return out


def _random_inputs(op_type, inputs, device, generator):
    bounds = ops.index_bounds(op_type, inputs)
    positive = ops.positive_inputs(op_type)
    tensors = []
    for i, (shape, dtype) in enumerate(inputs):
        if dtype == torch.bool:
            t = torch.rand(shape, generator=generator, device=device) < 0.5
        elif dtype.is_floating_point:
            t = torch.randn(shape, generator=generator, device=device, dtype=dtype)
            if positive:
                t = t.abs_().add_(0.1)
        else:
            t = torch.randint(0, max(bounds.get(i, 2), 1), shape, generator=generator, device=device, dtype=dtype)
        tensors.append(t)
    if op_type in ("adam", "adamw") and len(tensors) >= 4:
        tensors[-1] = tensors[-1].abs()  # Adam's second moment is non-negative
    return tensors


# Calls captured back to back in one CUDA graph; long ops need no more than one.
GRAPH_COPIES = 20
LONG_OP_SECONDS = 1e-3


def _timed(call, device, stream, options):
    """The CUDA-graph time of `call` on CUDA (eager where capture fails), else the eager time."""
    if device.type != "cuda":
        return measure(call, device, options)
    with torch.cuda.stream(stream):
        eager = measure(call, device, TimingOptions(options.warmup, 1, 0.0, 1))
    copies = 1 if eager.seconds >= LONG_OP_SECONDS else GRAPH_COPIES
    try:
        return measure_cuda_graph(call, device, stream, options, copies)
    except (RuntimeError, ValueError) as e:
        torch.cuda.synchronize(device)
        timing = measure(call, device, options)
        reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        return Timing(timing.seconds, timing.fastest, timing.slowest, timing.calls_per_repeat,
                      f"eager (CUDA graph capture failed: {reason})")


def _time_forward(fn, tensors, device, stream, options):
    def call():
        with torch.no_grad():
            return fn(*tensors)

    return _timed(call, device, stream, options)


def _time_backward(op_type, fn, tensors, request, device, stream, options):
    if op_type in ops.NOT_DIFFERENTIABLE:
        raise ops.Unsupported(f"'{op_type}' has no backward")
    grad_inputs = request.get("grad_inputs", [])
    grad_outputs = request.get("grad_outputs", [0])
    leaves = []
    for i in grad_inputs:
        if not (0 <= i < len(tensors)) or not tensors[i].is_floating_point():
            raise BadRequest(f"grad_inputs names input {i}, which is not a floating input")
        tensors[i] = tensors[i].detach().requires_grad_(True)
        leaves.append(tensors[i])
    if not leaves:
        raise ops.Unsupported("the backward produces no input gradient")
    # The forward runs on the stream the backward is captured on: autograd runs each backward node on its
    # forward node's stream.
    with torch.enable_grad(), torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        outputs = ops.as_tuple(fn(*tensors))
    selected = []
    for i in grad_outputs:
        if not (0 <= i < len(outputs)):
            raise BadRequest(f"grad_outputs names output {i} of {len(outputs)}")
        if not outputs[i].requires_grad:
            raise ops.Unsupported(f"output {i} does not depend differentiably on the inputs in torch")
        selected.append(outputs[i])
    seeds = [torch.ones_like(o) if o.dim() == 0 else torch.randn_like(o) for o in selected]

    def call():
        grads = torch.autograd.grad(selected, leaves, seeds, retain_graph=True, allow_unused=True)
        return [g.contiguous() for g in grads if g is not None]

    return _timed(call, device, stream, options)


def run_request(request, index, device, options, generator):
    """(timing or None, reason or None) for one request; BadRequest for a malformed one."""
    where = f"requests[{index}]"
    op_type = request.get("op_type")
    if not isinstance(op_type, str):
        raise BadRequest(f"{where}: \"op_type\" must be a string")
    inputs = _specs(request, "inputs", where)
    outputs = _specs(request, "outputs", where)
    attrs = {k: ops.attr_value(v) for k, v in (request.get("attrs") or {}).items()}
    backward = request.get("pass", "forward") == "backward"
    try:
        fn = ops.build(op_type, attrs, inputs, outputs)
        tensors = _random_inputs(op_type, inputs, device, generator)
        stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        if stream is not None:
            stream.wait_stream(torch.cuda.current_stream(device))  # the inputs are ready
        if backward:
            return _time_backward(op_type, fn, tensors, request, device, stream, options), None
        return _time_forward(fn, tensors, device, stream, options), None
    except ops.Unsupported as e:
        return None, str(e)
    except OUT_OF_MEMORY:
        return None, "out of memory on the device"
    except (RuntimeError, ValueError, TypeError, IndexError, NotImplementedError) as e:
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return None, f"torch failed: {first_line[:300]}"
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()


def timing_options(device, from_file, overrides):
    """Defaults by device, then the request file's "timing", then the command line."""
    values = {"warmup": 3, "repeats": 10, "min_time": 1e-3} if device.type == "cuda" else \
        {"warmup": 1, "repeats": 5, "min_time": 1e-3}
    for source in (from_file or {}, overrides):
        for name in ("warmup", "repeats", "min_time"):
            if source.get(name) is not None:
                values[name] = source[name]
    return TimingOptions(warmup=int(values["warmup"]), repeats=int(values["repeats"]),
                         min_time=float(values["min_time"]))
