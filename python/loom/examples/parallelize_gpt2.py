"""Train a small GPT-2 with loom.parallelize beside torch's own training of it: `loom run
python/loom/examples/parallelize_gpt2.py --nproc 4` (dp 2 x tp 2; with --nproc 2, pass `-- --tp 1`).

What a user writes: build the model (a transformers GPT-2 from a config, random init, float32, dropout 0),
hand it and one batch to loom.parallelize, call train_step per batch. Rank 0 then trains a copy of the same
module (same initial weights, same batches) with torch.optim.AdamW of the same hyperparameters in this one
process, and prints every step's loss beside Loom's, and how far the trained weights are apart; the last
line (LOSSES {...}) is JSON for tests. Exits 1 when a loss differs by more than --rtol.
"""

import argparse
import copy
import json
import os
import sys


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dp", type=int, default=2)
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--policy", default="megatron")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=128)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--rtol", type=float, default=1e-5)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import logging

    import torch
    import torch.distributed as dist
    import transformers

    import loom
    from loom.examples.reference import torch_adamw_losses

    transformers.logging.set_verbosity_error()
    logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=args.layers, n_embd=args.width, n_head=args.heads,
                                     vocab_size=args.vocab, n_positions=args.seq, resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)
    reference = copy.deepcopy(model)  # the same initial weights, for torch's run
    ids = [torch.randint(0, args.vocab, (args.batch, args.seq)) for _ in range(args.steps)]
    batches = [{"input_ids": x, "labels": x} for x in ids]
    optimizer = dict(lr=args.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=args.weight_decay)

    parallel = loom.parallelize(model, batches[0], policy=args.policy, dp=args.dp, tp=args.tp, pp=args.pp,
                                optimizer=optimizer)
    losses = [parallel.train_step(batch) for batch in batches]
    trained = parallel.state_dict()  # a collective: every rank gathers
    if rank != 0:
        return 0

    expected = torch_adamw_losses(reference, batches, optimizer)
    weights = reference.state_dict()
    # Adam moves each weight by about lr a step, so the weights' distance is told in units of lr (elements
    # whose gradient is rounding noise, like the attention keys' bias, differ most: Adam normalizes noise).
    weight_diff = max(float((trained[k] - weights[k]).abs().max()) for k in weights if weights[k].is_floating_point())
    plan = parallel.plan
    print(f"plan       {plan.description} on {plan.cluster}: step {plan.step_time * 1e3:.3f} ms simulated, MFU "
          f"{plan.mfu * 100:.1f} %, peak {max(plan.peak_memory) / 2**20:.1f} MiB")
    print(f"GPT-2      {args.layers} layers, width {args.width}, vocabulary {args.vocab}, sequence {args.seq}, batch "
          f"{args.batch}; AdamW lr {args.lr:g}, betas (0.9, 0.95), eps 1e-8, weight decay {args.weight_decay:g}\n")
    print(f"{'step':>4} | {'loom loss':>12} | {'torch loss':>12} | rel diff")
    worst = 0.0
    for step, (got, want) in enumerate(zip(losses, expected), start=1):
        rel = abs(got - want) / abs(want)
        worst = max(worst, rel)
        print(f"{step:>4} | {got:>12.7f} | {want:>12.7f} | {rel:.1e}")
    verdict = "equal" if worst <= args.rtol else "DIFFERENT"
    print(f"\nlosses {verdict}: max rel diff {worst:.1e} (rtol {args.rtol:g}); trained weights: max abs diff "
          f"{weight_diff:.1e} ({weight_diff / args.lr:.1e} lr)")
    print("LOSSES " + json.dumps({"loom": losses, "torch": expected, "weights_max_abs_diff": weight_diff,
                                  "plan": plan.description}))
    return 0 if worst <= args.rtol else 1


def run(argv=None):
    try:
        return main(argv)
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(run())
