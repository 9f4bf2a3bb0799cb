"""Capture on the meta device at any size: LLaMA-2-70B from its config (no weights: 69 B parameters would be
276 GB in float32) captured with `loom.trace(..., capture="export")`, then planned on 64 GPUs:
`PYTHONPATH=python:build/python .venv/bin/python bench/python/bench_capture_meta.py --loom build/loom`.

Each capture runs in a child process of its own, so its wall time and peak RSS (resource.getrusage's
ru_maxrss) are its own: first at fewer layers (--sweep, the same config otherwise) to show how the cost grows
with depth, then at the model's 80. The 80-layer graph is planned with `loom plan --graph g.json --cluster
dgx-a100x8 --policy megatron --tp 8 --pp 8` (64 GPUs, bfloat16 as released, selective recompute) and the
plan's numbers printed. A graph file is planned unfolded (every micro-batch's sub-ops: job_load.cc folds only
presets), so the micro-batches stay few (8) for the planner's memory limit. A capture traces the
model twice (batch and batch + 1) to record which sizes are the batch, so the plan's --global-batch is free.
"""

import argparse
import json
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

LLAMA2_70B = {  # meta-llama/Llama-2-70b-hf's config.json, the numbers that shape the graph
    "hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
    "intermediate_size": 28672, "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
    "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "float16",
}


def capture(layers, seq, batch, path):
    """Child: the model on meta, captured and saved; prints {wall_s, peak_rss_mb, parameters, ops} as JSON."""
    import torch
    import transformers

    import loom

    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(**{**LLAMA2_70B, "num_hidden_layers": layers})
    start = time.perf_counter()
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)  # as released; on meta: nothing moves
    ids = torch.zeros(batch, seq, dtype=torch.int64)
    graph = loom.trace(model, {"input_ids": ids, "labels": ids}, capture="export")
    wall = time.perf_counter() - start
    loom.save_graph(graph, path)
    print(json.dumps({"layers": layers, "wall_s": round(wall, 2),
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                      "parameters": sum(p.numel() for p in model.parameters()), "ops": len(graph["ops"])}))


def run_capture(layers, args, path):
    result = subprocess.run([sys.executable, __file__, "--child", str(layers), "--seq", str(args.seq), "--batch",
                             str(args.batch), "--graph", str(path)], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"capture at {layers} layers failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loom", default=str(ROOT / "build" / "loom"))
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=1, help="the capture's batch (the plan's is --global-batch)")
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--microbatches", type=int, default=8,
                        help="a graph file plans unfolded (every micro-batch's sub-ops): 29 or fewer fit the planner")
    parser.add_argument("--recompute", default="selective")
    parser.add_argument("--sweep", default="10,20,40", help="layer counts captured first (comma-separated)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--graph", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return capture(args.child, args.seq, args.batch, args.graph)

    with tempfile.TemporaryDirectory() as scratch:
        scratch = pathlib.Path(scratch)
        rows = [run_capture(int(n), args, scratch / f"g{n}.json") for n in args.sweep.split(",") if n]
        rows.append(run_capture(LLAMA2_70B["num_hidden_layers"], args, scratch / "g.json"))
        print(f"{'layers':>6} {'ops':>6} {'parameters':>14} {'capture s':>10} {'s/layer':>8} {'peak RSS MB':>12}")
        for r in rows:
            print(f"{r['layers']:>6} {r['ops']:>6} {r['parameters']:>14,} {r['wall_s']:>10.2f} "
                  f"{r['wall_s'] / r['layers']:>8.3f} {r['peak_rss_mb']:>12.1f}")
        command = [args.loom, "plan", "--graph", str(scratch / "g.json"), "--cluster", "dgx-a100x8", "--policy",
                   "megatron", "--tp", "8", "--pp", "8", "--global-batch", str(args.global_batch), "--microbatches",
                   str(args.microbatches), "--recompute", args.recompute, "--json", "--out", str(scratch / "out")]
        start = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode not in (0, 3):  # 3: planned, but some device is out of memory (printed below)
            sys.exit(f"loom plan failed:\n{result.stderr}")
        summary = json.loads(result.stdout)["summary"]
        peak = max(d["peak_bytes"] for d in summary["per_device"])
        print(f"plan (64 GPUs, tp 8 x pp 8, {args.microbatches} micro-batches, global batch {args.global_batch}, "
              f"seq {args.seq}, recompute {args.recompute}; planned in {time.perf_counter() - start:.1f} s): "
              f"step {summary['step_time_s']:.3f} s, MFU {summary['mfu']:.3f}, {summary['tokens_per_s']:,.0f} "
              f"tokens/s, peak memory per device {peak / 2**30:.1f} GiB"
              + (" (out of memory)" if result.returncode == 3 else ""))


if __name__ == "__main__":
    main()
