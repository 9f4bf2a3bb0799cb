"""Loom's tensor-parallel plan of a GPT-2 beside the same GPT-2 under torch's DTensor tensor parallelism
(torch.distributed.tensor.parallel), on --world gloo processes, one run side by side:
`PYTHONPATH=python .venv/bin/python bench/python/bench_dtensor_tp.py --loom build/loom`.

The model is GPT-2 written with nn.Linear (separate query, key and value projections): transformers' GPT-2
uses Conv1D modules, which DTensor's ColwiseParallel / RowwiseParallel do not shard (they take nn.Linear and
nn.Embedding only), so both sides run this GPT-2-equivalent model (pre-norm blocks, causal attention,
tanh GELU MLP of width 4d, untied LM head, mean cross entropy; no dropout). Loom traces it (`loom.trace`)
and plans it with `loom plan --graph G --policy tp --tp W --emit DIR`; torch shards the same module with
the Megatron layout: ColwiseParallel on q, k, v and fc, RowwiseParallel on o and proj (2 all-reduces per
layer forward, 2 backward), embeddings, norms and the head replicated. Both take AdamW steps with the plan's
hyper-parameters on the same global batch (every rank sees it whole). A step's time is the slowest rank's;
the first step is left out (median of steps 2..N), the pair runs --repeats times interleaved, and the
table gives every repeat, the medians and their ratio. Initial values differ (Loom draws its own): timing
only.
"""

import argparse
import datetime
import os
import pathlib
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_ddp import plan_adamw, run_loom, run_ranks, side_by_side, slowest_rank_steps, step_batches  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def gpt2_linear(layers, width, heads, vocab, seq):
    """GPT-2 with nn.Linear projections (built inside the worker so torch is imported there)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.head_dim = width // heads
            self.q, self.k, self.v, self.o = (nn.Linear(width, width) for _ in range(4))

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = (p(x).view(b, t, -1, self.head_dim).transpose(1, 2) for p in (self.q, self.k, self.v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o(y.transpose(1, 2).reshape(b, t, -1))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.attn = Attention()
            self.fc, self.proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(seq, width)
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(width)
            self.lm_head = nn.Linear(width, vocab, bias=False)

        def forward(self, input_ids, labels):
            positions = torch.arange(input_ids.shape[1], device=input_ids.device)
            x = self.wte(input_ids) + self.wpe(positions)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))

    return GPT2()


def tp_plan(layers):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = {}
    for i in range(layers):
        for name in ("attn.q", "attn.k", "attn.v", "fc"):
            plan[f"h.{i}.{name}"] = ColwiseParallel()
        for name in ("attn.o", "proj"):
            plan[f"h.{i}.{name}"] = RowwiseParallel()
    return plan


def trace(args, path):
    import torch

    import loom

    torch.manual_seed(0)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq))
    model = gpt2_linear(args.layers, args.width, args.heads, args.vocab, args.seq)
    loom.save_graph(loom.trace(model, {"input_ids": ids, "labels": ids}), path)


def plan(args, graph, out):
    command = [args.loom, "plan", "--graph", str(graph), "--policy", "tp", "--tp", str(args.world), "--gpus",
               str(args.world), "--out", str(out / "plan"), "--emit", str(out / "emit")]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"bench_dtensor_tp: `{' '.join(command)}` failed:\n{result.stdout}{result.stderr}")
    return out / "emit", " ".join(command)


def _dtensor_worker(rank, port, args, out_dir):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.world, timeout=datetime.timedelta(seconds=300))
    mesh = init_device_mesh("cpu", (args.world,))
    torch.manual_seed(0)
    model = gpt2_linear(args.layers, args.width, args.heads, args.vocab, args.seq)
    parallelize_module(model, mesh, tp_plan(args.layers))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), **args.adamw)
    step_s, losses = [], []
    for ids in step_batches(args):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = model(ids, ids)
        loss.backward()
        optimizer.step()
        step_s.append(time.perf_counter() - start)
        losses.append(float(loss.detach()))
    torch.save({"step_s": step_s, "losses": losses}, out_dir / f"dtensor_rank_{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


def run_dtensor(args, out):
    import torch
    import torch.multiprocessing as mp

    out.mkdir(parents=True, exist_ok=True)
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["torch", "torch.distributed"])
    failed = run_ranks(context, _dtensor_worker, args.world, args, out)
    if failed:
        raise SystemExit(f"bench_dtensor_tp: DTensor failed: {', '.join(failed)}")
    ranks = [torch.load(out / f"dtensor_rank_{r}.pt") for r in range(args.world)]
    steps = slowest_rank_steps([r["step_s"] for r in ranks])
    return statistics.median(steps[1:]), ranks[0]["losses"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loom", default=str(ROOT / "build" / "loom"), help="the engine binary")
    parser.add_argument("--out", default=str(ROOT / "build" / "run" / "bench_dtensor_tp"), help="working directory")
    parser.add_argument("--steps", type=int, default=6, help="AdamW steps per run (the first is left out)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--world", type=int, default=2, help="gloo processes = tensor-parallel degree")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4, help="global batch (every rank computes all of it)")
    args = parser.parse_args(argv)
    if not pathlib.Path(args.loom).is_file():
        print(f"bench_dtensor_tp: no engine binary at {args.loom}: build it or pass --loom", file=sys.stderr)
        return 1
    if args.steps < 2 or args.width % args.heads or args.heads % args.world:
        print("bench_dtensor_tp: --steps >= 2, heads dividing the width and the world dividing the heads",
              file=sys.stderr)
        return 1
    args.loom = str(pathlib.Path(args.loom).resolve())
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    graph = out / "gpt2_linear.json"
    trace(args, graph)
    emit, command = plan(args, graph, out)
    args.adamw = plan_adamw(emit)
    print(f"GPT-2 (nn.Linear): {args.layers} layers, width {args.width}, {args.heads} heads, vocabulary {args.vocab}, "
          f"sequence {args.seq}, batch {args.batch}, float32; tp {args.world} on {args.world} gloo processes, "
          f"1 thread each")
    print(f"planned: {command}")
    print(f"torch: parallelize_module(Colwise q/k/v/fc, Rowwise o/proj); AdamW {args.adamw} on both sides")
    print(f"{args.steps} AdamW steps per run; step time = slowest rank, median of steps 2..{args.steps}\n")
    side_by_side(lambda: run_loom(emit, args, out / "loom_results"), lambda: run_dtensor(args, out / "dtensor_results"),
                 "DTensor", args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
