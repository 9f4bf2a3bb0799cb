"""Policies written in Python (docs/python_api.md, "Policies in Python"), as nnScaler's users write them: a
function policy(plan, resource) that transforms the job's fresh Plan with the three primitives

    plan.trans(sub_op, Split("h") | Replicate() | ValueSplit(), n)   # op-trans: n parts (ids returned)
    plan.assign(sub_op, device)                                     # op-assign
    plan.order(first, second)                                       # op-order: first happens before second

and the helpers the built-in policies compose (batch_identifiers, split_micro_batches, tensor_parallel_layout,
megatron_stages, device_of, apply_schedule, block_sub_ops, apply_recompute, ...). Every name here is the
engine's (the `_loom_engine` extension, src/bindings): the plan, its checks and its errors stay in C++;
loom.plan(..., policy=function) then validates, materializes, simulates and reports it like a built-in one.

    from loom.policy import Replicate, Split, batch_identifiers

    def data_parallel(plan, resource):
        ...
    result = loom.plan("gpt3-125m", shrink=True, layers=2, gpus=2, policy=data_parallel)
"""

from .api import _engine

__all__ = ["Plan", "Resource", "Config", "Op", "Tensor", "SubOp", "SubTensor", "Block", "TensorParallelLayout",
           "Split", "Replicate", "ValueSplit", "batch_identifiers", "split_micro_batches", "tensor_parallel_layout",
           "megatron_stages", "pipeline_stages", "layer_stages", "device_of", "pipeline_device", "apply_schedule",
           "block_sub_ops", "apply_recompute", "split"]


def __getattr__(name):
    """The engine's class or helper of that name (imported on first use, so `import loom` works unbuilt)."""
    if name in __all__ and name != "split":
        return getattr(_engine(), name)
    raise AttributeError(f"module 'loom.policy' has no attribute '{name}'")


def split(plan, sub_op, algo, n):
    """plan.trans(sub_op, algo, n), or [sub_op] when n is 1 (a one-part trans would only rename it), as the
    built-in policies split each degree."""
    return [sub_op] if n == 1 else plan.trans(sub_op, algo, n)
