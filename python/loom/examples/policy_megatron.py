"""Megatron-LM's dp x tp x pp written in Python with the primitives (docs/python_api.md, "Policies in
Python"): the plan `loom plan --policy megatron` builds, byte for byte, composed here as the engine's
Composer composes it (src/policy/megatron_composer.h) from the same helpers.

    python -m loom.examples.policy_megatron --model gpt3-125m --layers 2 --dp 2 --tp 2 --out out/py
    loom plan --model gpt3-125m --shrink --layers 2 --policy megatron --dp 2 --tp 2 --out out/cc
    cmp out/py/plan.json out/cc/plan.json

Per forward op: micro-batches along its batch identifier (pipelines, or several micro-batches), dp parts
along the batch (replicas for ops without one), tp parts where tensor_parallel_layout splits it (replicas with
whole gradients elsewhere), placed on device_of(stage, dp rank, tp rank). The followers (optimizer steps,
gradient accumulations) go with the tensor they own; pipelines get the schedule's order. Megatron's other
options (ZeRO, coshard, the interlaced pipeline, per-layer degrees, virtual stages, 3F1B) are the built-in
policy's: asked for here, they are refused.
"""

import argparse
import sys

from loom.policy import (Replicate, Split, ValueSplit, apply_recompute, apply_schedule, batch_identifiers,
                         block_sub_ops, device_of, megatron_stages, pipeline_device, split, split_micro_batches,
                         tensor_parallel_layout)


def tensor_batch_dims(plan, batch):
    """By tensor id, its batch dimension (-1: none): dimension 0 of the graph inputs, then each batch-carrying
    forward op's outputs where its batch identifier sits (as batch_identifiers follows the batch)."""
    tensors = plan.tensors
    dims = [-1] * len(tensors)
    for t in plan.inputs:
        if tensors[t].shape:
            dims[t] = 0
    for op in plan.ops:
        if op.pass_ != "forward" or batch[op.id] is None:
            continue
        any_part = plan.parts(op.id)[0]
        for j, out in enumerate(op.outputs):
            for d in range(len(tensors[out].shape)):
                if plan.dim_identifier(any_part, True, j, d) == batch[op.id]:
                    dims[out] = d
                    break
    return dims


def tensor_stages(plan, op_stage):
    """By tensor id, the stage of its first forward reader or writer (0 when none)."""
    stage = [-1] * len(plan.tensors)
    for op in plan.ops:
        if op.pass_ == "forward":
            for t in [*op.inputs, *op.outputs]:
                if stage[t] < 0:
                    stage[t] = op_stage[op.id]
    return [max(s, 0) for s in stage]


class Megatron:
    """One plan's composition: what it derives from the graph first, then forward ops, followers, schedule."""

    def __init__(self, plan, config):
        self.plan, self.c = plan, config
        self.ops, self.tensors = plan.ops, plan.tensors
        self.layout = tensor_parallel_layout(plan, config.tp, config.sequence_parallel)
        self.stage = [s if s < 0 else pipeline_device(config.schedule, s, config.pp)
                      for s in megatron_stages(plan, config)]
        self.tensor_stage = tensor_stages(plan, self.stage)
        self.batch = batch_identifiers(plan)
        self.batch_dims = tensor_batch_dims(plan, self.batch)
        # blocks[(stage, dp rank, tp rank)][micro-batch]: the forward parts that carry the batch, in program order.
        self.blocks = {}

    def device(self, stage, r, j):
        return device_of(self.c, stage, r, j)

    def run(self):
        pieces = self.micro_batches()
        for op in self.ops:
            if op.pass_ == "forward":
                self.place_forward(op, pieces[op.id])
        for op in self.ops:
            if op.pass_ != "forward" and not op.is_mirror:
                self.place_follower(op)
        self.schedule()
        apply_recompute(self.plan, self.c.recompute)

    def micro_batches(self):
        """By op id, forward ops: their micro-batch pieces (one piece for ops without a batch)."""
        pieces = {op.id: self.plan.parts(op.id)[:1] for op in self.ops if op.pass_ == "forward"}
        if self.c.micro_batches > 1:
            batched = [op.id for op in self.ops if op.pass_ == "forward" and self.batch[op.id] is not None]
            for op, parts in zip(batched, split_micro_batches(self.plan, batched, self.c.micro_batches)):
                pieces[op] = parts
        return pieces

    def place_forward(self, op, pieces):
        c, batch = self.c, self.batch[op.id]
        data = Split(batch) if batch is not None else Replicate()
        # Ops tensor parallelism does not split run on every tp rank with whole gradients (Megatron's norms).
        tensor = self.layout.splits[op.id] or Replicate(redundant_backward=True)
        for k, piece in enumerate(pieces):
            for r, dp_part in enumerate(split(self.plan, piece, data, c.dp)):
                for j, part in enumerate(split(self.plan, dp_part, tensor, c.tp)):
                    self.plan.assign(part, self.device(self.stage[op.id], r, j))
                    if batch is not None:
                        self.blocks.setdefault((self.stage[op.id], r, j), [[] for _ in range(c.micro_batches)])
                        self.blocks[(self.stage[op.id], r, j)][k].append(part)

    def place_follower(self, op):
        """An optimizer step (owner: its parameter), a gradient accumulation or the loss-gradient seed (owner: the
        tensor whose gradient it writes), on the owner's stage: micro-batch and dp parts along the owner's batch
        (replicas without one; the partial sums of every micro-batch and dp rank split by value instead), then tp
        parts along the owner's tensor-parallel dimension."""
        c, plan = self.c, self.plan
        if op.pass_ == "optimizer":
            owner = op.inputs[0]
        else:
            owner = self.tensors[op.outputs[0]].owner if op.outputs else -1
        stage = self.tensor_stage[owner] if owner >= 0 else 0
        whole = plan.parts(op.id)[0]

        def identifier_at(dim):
            return None if dim < 0 else plan.dim_identifier(whole, True, 0, dim)

        is_parameter = owner >= 0 and self.tensors[owner].role == "parameter"
        batch = None if is_parameter or owner < 0 else identifier_at(self.batch_dims[owner])
        tensor = identifier_at(self.layout.tensor_dims[owner]) if owner >= 0 else None
        sums = c.micro_batches * c.dp
        accumulate = batch is None and sums > 1 and op.linear and self.partial_sums_of(op) == sums
        data = ValueSplit() if accumulate else algo(batch)
        tensor_split = algo(tensor) if accumulate else self.tensor_algo(op, tensor, c.tp)
        pieces = split(plan, whole, data, c.micro_batches) if batch is not None else [whole]
        for piece in pieces:
            for r, dp_part in enumerate(split(plan, piece, data, c.dp)):
                for j, part in enumerate(split(plan, dp_part, tensor_split, c.tp)):
                    plan.assign(part, self.device(stage, r, j))

    def input_value_counts(self, op):
        """The value count of each producer part's write of each input of `op`, and whether every input has
        a producer."""
        counts, produced = [], True
        for t in op.inputs:
            producer = self.tensors[t].producer
            if producer < 0:
                produced = False
                continue
            for part in self.plan.parts(producer):
                counts += [out.value[1] for out in self.plan.sub_op(part).outputs if out.tensor == t]
        return counts, produced

    def partial_sums_of(self, op):
        """The value count every producer part of every input of `op` writes it with (0: they differ, or an
        input has no producer)."""
        counts, produced = self.input_value_counts(op)
        return counts[0] if produced and counts and len(set(counts)) == 1 else 0

    def tensor_algo(self, op, tensor, ways):
        """Along the owner's tensor-parallel dimension; else an accumulation of partial sums (a producer part
        writes an input as a value part) by value; else replicas."""
        if tensor is not None:
            return Split(tensor)
        reads_partial_sums = any(count != 1 for count in self.input_value_counts(op)[0])
        return ValueSplit() if ways > 1 and op.linear and reads_partial_sums else Replicate()

    def schedule(self):
        """Each (dp rank, tp rank) pipeline's blocks ordered by the schedule template; each gradient
        accumulation ordered after the block before its backward block."""
        c = self.c
        if c.pp == 1 and c.micro_batches == 1:
            return
        starts = {}  # device -> {(stage, micro-batch): the last sub-op of the block before that backward block}
        for r in range(c.dp):
            for j in range(c.tp):
                stages = [self.blocks[(s, r, j)] for s in range(c.pp)]
                sequences = apply_schedule(self.plan, c.schedule, 1, stages, block_order=c.block_order)
                for s in range(c.pp):
                    previous = None
                    for b in sequences[s]:
                        sub_ops = block_sub_ops(self.plan, stages[b.stage][b.micro_batch], b.part)
                        if not sub_ops:
                            continue
                        if b.part == "B" and previous is not None:
                            starts.setdefault(self.device(s, r, j), {})[(b.stage, b.micro_batch)] = previous
                        previous = sub_ops[-1]
        self.order_gradient_accumulations(starts)

    def order_gradient_accumulations(self, starts):
        producer_stage = [-1] * len(self.tensors)
        for op in self.ops:
            if op.pass_ == "forward" and self.batch[op.id] is not None:
                for t in op.outputs:
                    producer_stage[t] = self.stage[op.id]
        for op in self.ops:
            if op.pass_ != "backward" or op.is_mirror or not op.outputs:
                continue
            owner = self.tensors[op.outputs[0]].owner
            if owner < 0 or producer_stage[owner] < 0 or self.batch_dims[owner] < 0:
                continue
            dim = self.batch_dims[owner]
            per_micro_batch = self.tensors[owner].shape[dim] // self.c.micro_batches
            for part in self.plan.parts(op.id):
                sub = self.plan.sub_op(part)
                micro_batch = sub.outputs[0].box[dim][0] // per_micro_batch
                start = starts.get(sub.device, {}).get((producer_stage[owner], micro_batch))
                if start is not None:
                    self.plan.order(start, part)


def algo(identifier):
    return Split(identifier) if identifier is not None else Replicate()


def megatron(plan, resource):
    """The policy: resource.config's dp x tp x pp over `plan`, as `loom plan --policy megatron` plans it."""
    c = resource.config
    refused = {"ZeRO": c.zero > 0, "virtual stages": c.virtual_stages > 1, "coshard": c.coshard > 1,
               "per-layer degrees": bool(c.layer_tp), "the interlaced pipeline": c.interlaced,
               f"{c.overlap} overlap": c.overlap != "none",
               f"schedule {c.schedule}": c.pp > 1 and c.schedule not in ("1f1b", "gpipe")}
    for what, asked in refused.items():
        if asked:
            raise ValueError(f"this example composes megatron without {what}: use --policy megatron for it")
    Megatron(plan, c).run()


def main(argv=None):
    import loom

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gpt3-125m")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dp", type=int, default=2)
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--microbatches", type=int, default=None, help="default: 2 x pp when pipelined, else 1")
    parser.add_argument("--out", required=True, help="the directory plan.json, exec.json, ... go to")
    args = parser.parse_args(argv)
    result = loom.plan(args.model, shrink=True, layers=args.layers, dp=args.dp, tp=args.tp, pp=args.pp,
                       micro_batches=args.microbatches, gpus=args.dp * args.tp * args.pp, policy=megatron)
    result.write_files(args.out)
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
