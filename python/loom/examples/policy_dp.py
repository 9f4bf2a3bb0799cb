"""Data parallelism in a few lines of Python with the primitives (docs/python_api.md, "Policies in Python"):
every op that sees the batch split along it over all GPUs, part r on device r; the rest (ops without a batch,
optimizer steps, parameter-gradient sums) replicated, replica r on device r. The engine then finds the
all-reduces the replicas need.

    python -m loom.examples.policy_dp --model gpt3-125m --layers 2 --gpus 2
"""

import argparse
import sys

from loom.examples.policy_megatron import tensor_batch_dims
from loom.policy import Replicate, Split, batch_identifiers, split


def data_parallel(plan, resource):
    """resource.gpus data-parallel ranks over `plan`."""
    n = resource.gpus
    batch = batch_identifiers(plan)
    batch_dims = tensor_batch_dims(plan, batch)
    tensors = plan.tensors
    for op in plan.ops:
        if op.is_mirror:  # a backward op follows its forward op's parts
            continue
        whole = plan.parts(op.id)[0]
        if op.pass_ == "forward":
            identifier = batch[op.id]
        else:  # a gradient sum or the loss-gradient seed goes along its tensor's batch, when it has one
            owner = tensors[op.outputs[0]].owner if op.outputs and op.pass_ != "optimizer" else -1
            dim = batch_dims[owner] if owner >= 0 else -1
            identifier = plan.dim_identifier(whole, True, 0, dim) if dim >= 0 else None
        algo = Split(identifier) if identifier is not None else Replicate()
        for device, part in enumerate(split(plan, whole, algo, n)):
            plan.assign(part, device)


def main(argv=None):
    import loom

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gpt3-125m")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=2)
    args = parser.parse_args(argv)
    result = loom.plan(args.model, shrink=True, layers=args.layers, gpus=args.gpus, policy=data_parallel)
    proof = result.verify()
    print(f"{result}\nverify: worst relative error {proof['worst']:.3g} against one device")
    return 0 if proof["worst"] <= 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main())
