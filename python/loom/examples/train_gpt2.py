"""Train a small GPT-2 with the plan Loom finds, beside one process: `python -m loom.examples.train_gpt2`.

A transformers GPT-2 from a config (random init, float32) is traced (`loom.trace`) and written as the
engine's graph JSON; the engine plans it (`loom plan --graph ... --policy megatron --dp 2 --tp 2 --emit`)
and plans it for one device; both programs train for --steps AdamW steps on the same batches
(`loom.runtime.launch.train`), and a table puts the loss of every step of the 4 processes beside the single
process's. The tensors' initial values and batches come from the runtime's seeded generator
(docs/codegen.md), not from the module's own init. Planning is the engine's; this script only runs it.
"""

import argparse
import pathlib
import subprocess
import sys
import time

RTOL = 1e-5


def trace_gpt2(path, layers, width, heads, vocab, seq, batch):
    import logging

    import torch
    import transformers

    import loom

    # The tracer's notices (use_cache switched off, fx's is_fx_tracing note) say nothing about this run.
    transformers.logging.set_verbosity_error()
    logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab, n_positions=seq)
    ids = torch.randint(0, vocab, (batch, seq))
    loom.save_graph(loom.trace(transformers.GPT2LMHeadModel(config), {"input_ids": ids, "labels": ids}), path)


def plan(loom_binary, graph, policy_args, out):
    command = [loom_binary, "plan", "--graph", str(graph), *policy_args, "--out", str(out / "plan"), "--emit",
               str(out / "emit")]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"train_gpt2: `{' '.join(command)}` failed:\n{result.stderr}")
    return out / "emit", " ".join(command)


def main(argv=None):
    root = pathlib.Path(__file__).resolve().parents[3]
    parser = argparse.ArgumentParser(prog="python -m loom.examples.train_gpt2", description=__doc__.split("\n\n")[0])
    parser.add_argument("--loom", default=str(root / "build" / "loom"), help="the engine binary")
    parser.add_argument("--out", default=str(root / "build" / "run" / "train_gpt2"), help="working directory")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--dp", type=int, default=2)
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args(argv)
    if not pathlib.Path(args.loom).is_file():
        print(f"train_gpt2: no engine binary at {args.loom}: build it (make build) or pass --loom", file=sys.stderr)
        return 1

    from loom.runtime.launch import LaunchError, train

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    graph = out / "gpt2.json"
    heads = max(1, args.width // 16)
    trace_gpt2(graph, args.layers, args.width, heads, 128, args.seq, args.batch)
    world = args.dp * args.tp
    print(f"GPT-2 ({args.layers} layers, width {args.width}, {heads} heads, vocabulary 128, sequence {args.seq}, "
          f"batch {args.batch}, float32) traced to {graph}")
    parallel, parallel_command = plan(args.loom, graph, ["--policy", "megatron", "--dp", str(args.dp), "--tp",
                                                         str(args.tp)], out / "megatron")
    single, _ = plan(args.loom, graph, ["--policy", "dp", "--dp", "1"], out / "single")
    print(f"planned    {parallel_command}")
    try:
        start = time.monotonic()
        losses, _ = train(parallel, args.steps)
        parallel_s = time.monotonic() - start
        start = time.monotonic()
        reference, _ = train(single, args.steps)
        single_s = time.monotonic() - start
    except LaunchError as e:
        print(f"train_gpt2: {e}", file=sys.stderr)
        return 1
    print(f"trained    {args.steps} AdamW steps on {world} gloo processes ({parallel_s:.1f} s) and on 1 process "
          f"({single_s:.1f} s)\n")
    print(f"{'step':>4} | {'loom loss':>12} | {'1-process loss':>14} | rel diff")
    worst = 0.0
    for step, (got, want) in enumerate(zip(losses, reference), start=1):
        rel = abs(got - want) / abs(want)
        worst = max(worst, rel)
        print(f"{step:>4} | {got:>12.7f} | {want:>14.7f} | {rel:.1e}")
    verdict = "equal" if worst <= RTOL else "DIFFERENT"
    print(f"\nlosses {verdict}: max rel diff {worst:.1e} (rtol {RTOL:g}); loss {reference[0]:.4f} -> {reference[-1]:.4f}")
    return 0 if worst <= RTOL else 1


if __name__ == "__main__":
    sys.exit(main())
