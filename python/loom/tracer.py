"""loom.trace: a torch.nn.Module and example inputs to the engine's graph JSON (a Python dict).

1. capture (capture.py): torch.fx (HuggingFace's tracer for its models), the loss appended, every
   node's value recorded on the examples;
2. lower (lowering/): each node whose value depends on an input or a parameter becomes registry ops;
   values that do not (sizes, dtypes, position ids, masks built from constants) are folded: numbers
   stay numbers, tensors become "buffer" tensors;
3. finish: fused projections cut into equal parts (GPT-2's c_attn) laid out per part, so tensor parallelism
   splits them per head (fused_projection.py); only what the loss needs is kept (graph_json.py).
Unknown ops are all collected and reported in one UnsupportedOpsError. The walk is tracer_lowering.py
(writes into tensors: tracer_writes.py), the loss among the outputs tracer_loss.py, names and the error
tracer_names.py; capture="export" is export_capture.py.
"""

import warnings

import torch

from . import capture as fx_capture, custom_ops, export_capture, fused_projection, lowering
from .graph_json import batch_sizes
from .tracer_lowering import Lowering
from .tracer_loss import _find_loss
from .tracer_names import UnsupportedOpsError

__all__ = ["UnsupportedOpsError", "trace"]


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
