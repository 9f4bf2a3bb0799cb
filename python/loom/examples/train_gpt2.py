"""Train a small GPT-2 with the plan Loom finds, beside one process and beside torch: `python -m
loom.examples.train_gpt2`.

A transformers GPT-2 from a config (random init, float32, dropout 0) is traced (`loom.trace`) and written as
the engine's graph JSON; the engine searches Megatron-LM's space of plans for 4 GPUs (`loom plan --graph ...
--policy megatron-best --gpus 4 --emit`: tp, pp, dp, micro-batch size, sequence parallelism and recomputation,
each candidate planned and simulated, the fastest that fits kept; or, with --dp/--tp, that megatron plan) and
plans it for one device; both programs train for --steps AdamW steps from the module's own weights on
the same batches (`loom.runtime.launch.train`), and torch trains the module itself with torch.optim.AdamW of
the same hyperparameters. A table puts the loss of every step of the 4 processes beside the single
process's and torch's. Planning is the engine's; this script only runs it.
"""

import argparse
import copy
import pathlib
import subprocess
import sys
import time

RTOL = 1e-5


# AdamW as Megatron's defaults but a learning rate a 20-step demo can see, for the plan and torch.optim.AdamW.
OPTIMIZER = {"lr": 1e-3, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
OPTIMIZER_ARGS = ["--lr", "1e-3", "--beta1", "0.9", "--beta2", "0.95", "--eps", "1e-8", "--weight-decay", "0.1"]


def gpt2_and_batches(layers, width, heads, vocab, seq, batch, steps):
    """A GPT-2 from a config (seeded random init, dropout 0) and one batch per step of sequences a model can
    learn: counting from a random token in random strides (mod the vocabulary)."""
    import logging

    import torch
    import transformers

    # The tracer's notices (use_cache switched off, fx's is_fx_tracing note) say nothing about this run.
    transformers.logging.set_verbosity_error()
    logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab, n_positions=seq,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)
    tokens = [(torch.randint(0, vocab, (batch, 1)) + torch.randint(1, 4, (batch, 1)) * torch.arange(seq)) % vocab
              for _ in range(steps)]
    return model, [{"input_ids": ids, "labels": ids} for ids in tokens]


def plan(loom_binary, graph, policy_args, out):
    command = [loom_binary, "plan", "--graph", str(graph), *policy_args, *OPTIMIZER_ARGS, "--out", str(out / "plan"),
               "--emit", str(out / "emit")]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"train_gpt2: `{' '.join(command)}` failed:\n{result.stderr}")
    for line in result.stdout.splitlines():  # the search's account and the plan it chose
        if line.startswith(("search ", "policy ")):
            print(line)
    return out / "emit", " ".join(command)


def main(argv=None):
    root = pathlib.Path(__file__).resolve().parents[3]
    parser = argparse.ArgumentParser(prog="python -m loom.examples.train_gpt2", description=__doc__.split("\n\n")[0])
    parser.add_argument("--loom", default=str(root / "build" / "loom"), help="the engine binary")
    parser.add_argument("--out", default=str(root / "build" / "run" / "train_gpt2"), help="working directory")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--gpus", type=int, default=4, help="processes the searched plan runs on")
    parser.add_argument("--dp", type=int, default=None, help="with --tp: this megatron plan instead of the search")
    parser.add_argument("--tp", type=int, default=None)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args(argv)
    if not pathlib.Path(args.loom).is_file():
        print(f"train_gpt2: no engine binary at {args.loom}: build it (make build) or pass --loom", file=sys.stderr)
        return 1

    import loom
    from loom.examples.reference import torch_adamw_losses
    from loom.runtime.initial import module_state
    from loom.runtime.launch import LaunchError, load_manifest, train

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    graph = out / "gpt2.json"
    heads = max(1, args.width // 16)
    model, batches = gpt2_and_batches(args.layers, args.width, heads, 128, args.seq, args.batch, args.steps)
    loom.save_graph(loom.trace(model, batches[0]), graph)
    print(f"GPT-2 ({args.layers} layers, width {args.width}, {heads} heads, vocabulary 128, sequence {args.seq}, "
          f"batch {args.batch}, float32) traced to {graph}")
    if args.dp is None and args.tp is None:
        policy_args = ["--policy", "megatron-best", "--gpus", str(args.gpus)]
    else:
        policy_args = ["--policy", "megatron", "--dp", str(args.dp or 1), "--tp", str(args.tp or 1),
                       "--gpus", str((args.dp or 1) * (args.tp or 1))]
    parallel, parallel_command = plan(args.loom, graph, policy_args, out / "parallel")
    single, _ = plan(args.loom, graph, ["--policy", "dp", "--dp", "1", "--gpus", "1"], out / "single")
    print(f"planned    {parallel_command}")
    try:
        manifest = load_manifest(parallel)
        world = manifest["world_size"]
        weights = module_state(model, manifest)
        start = time.monotonic()
        losses, _ = train(parallel, args.steps, initial=weights, batches=batches)
        parallel_s = time.monotonic() - start
        start = time.monotonic()
        reference, _ = train(single, args.steps, initial=weights, batches=batches)
        single_s = time.monotonic() - start
    except LaunchError as e:
        print(f"train_gpt2: {e}", file=sys.stderr)
        return 1
    expected = torch_adamw_losses(copy.deepcopy(model), batches, OPTIMIZER)
    print(f"trained    {args.steps} AdamW steps on {world} gloo processes ({parallel_s:.1f} s), on 1 process "
          f"({single_s:.1f} s) and with torch.optim.AdamW on the module itself\n")
    print(f"{'step':>4} | {'loom loss':>12} | {'1-process loss':>14} | {'torch loss':>12} | max rel diff")
    worst = 0.0
    for step, (got, want, torch_loss) in enumerate(zip(losses, reference, expected), start=1):
        rel = max(abs(got - want) / abs(want), abs(got - torch_loss) / abs(torch_loss))
        worst = max(worst, rel)
        print(f"{step:>4} | {got:>12.7f} | {want:>14.7f} | {torch_loss:>12.7f} | {rel:.1e}")
    verdict = "equal" if worst <= RTOL else "DIFFERENT"
    print(f"\nlosses {verdict}: max rel diff {worst:.1e} (rtol {RTOL:g}); loss {expected[0]:.4f} -> {expected[-1]:.4f}")
    return 0 if worst <= RTOL else 1


if __name__ == "__main__":
    sys.exit(main())
