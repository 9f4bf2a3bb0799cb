"""Loom's generated program on one GPU beside torch eager, and beside the step and memory Loom's simulator
predicts from op times measured on that GPU. Three phases, because the engine plans here and the GPU sits on
another machine (the device tool's; its Python has CUDA torch and transformers, not the engine):

    PYTHONPATH=python:build/python .venv/bin/python bench/python/bench_gpu_step.py prepare --work gpu_work
    # on the GPU machine, with gpu_work/ and python/ copied along:
    PYTHONPATH=python python3 bench/python/bench_gpu_step.py device --work gpu_work --out RESULTS_DIR
    PYTHONPATH=python:build/python .venv/bin/python bench/python/bench_gpu_step.py report --work gpu_work \\
        --results RESULTS_DIR [--json]

prepare: traces transformers GPT-2 configs (float32, dropout 0) at their batch, plans each on one GPU of
`--cluster` (`loom plan --graph G --policy dp --gpus 1 --emit`), writes the timer's request file for every op
key the plans run (`loom profile --dry-run --requests`), and plans the tensor-parallel pair of
bench_oases.py (tp 2 on 2 ranks, with and without `--overlap oases`) for the NCCL try.

device: times the requests (`python -m loom_profile`); per config, trains the generated program (world 1,
`loom.runtime.launch.run_rank` on cuda) and the same transformers model in torch eager from the same initial
weights and batches, fp32 matmuls at full precision (torch's default: no TF32) on both sides: the losses of the
first steps side by side, the median step over steps 2..N (wall time with the GPU synchronized at each step's
end), and torch.cuda.max_memory_allocated of each; then launches the tp 2 programs on NCCL with both ranks on the
one GPU (NCCL refuses two ranks on one device; the error is recorded, the timings kept where it runs).

report: merges the measurements into data/profiles/<GPU>.json (`loom profile --results`), predicts each
config's step and peak memory with that database (`loom plan --profile`) and without (roofline), and prints
measured beside predicted with their ratios, the loss agreement, and the roofline-to-measured ratio per op
class (`loom profile --compare`).
"""

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1].parent
sys.path.insert(0, str(ROOT / "python"))

# name: (layers, width, heads, vocab, seq, batch). GPT-2 small and medium widths at a sequence of 1024; medium
# at batch 2 because tracing runs the model on real tensors here (GPT-2 medium at batch 8 took over 22 GB).
CONFIGS = {
    "gpt2-small-b8": (12, 768, 12, 50304, 1024, 8),
    "gpt2-medium-b2": (24, 1024, 16, 50304, 1024, 2),
}
# --tiny: a check of the phases on this machine's CPU (`device --on cpu`), seconds instead of a GPU's minutes.
TINY = {"gpt2-tiny-b4": (2, 64, 4, 1024, 64, 4)}
EQUAL_STEPS = 3
TIMED_STEPS = 12


def gpt2_config(spec):
    import transformers

    layers, width, heads, vocab, seq, _ = spec
    return transformers.GPT2Config(n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab, n_positions=seq,
                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def batches(spec, steps):
    import torch

    *_, vocab, seq, batch = spec
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, vocab, (batch, seq), generator=generator) for _ in range(steps)]


def loom_cmd(args, *words):
    return subprocess.run([args.loom, *words], check=True, capture_output=True, text=True).stdout


# --- prepare (here) -------------------------------------------------------------------------------------------

def prepare(args):
    import logging

    import torch
    import transformers

    import loom

    transformers.logging.set_verbosity_error()
    logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    requests, plans = [], {}
    configs = dict(TINY if args.tiny else CONFIGS)
    for name, spec in (TINY if args.tiny else CONFIGS).items():
        torch.manual_seed(0)
        ids = batches(spec, 1)[0]
        graph = work / f"{name}.graph.json"
        request = work / f"{name}.requests.json"
        requests.append(request.name)
        plans[name] = ["--graph", str(graph), "--policy", "dp", "--gpus", "1"]
        if request.exists():
            continue  # prepared by an earlier run
        loom.save_graph(loom.trace(transformers.GPT2LMHeadModel(gpt2_config(spec)), {"input_ids": ids, "labels": ids}),
                        graph)
        plan = plans[name]
        loom_cmd(args, "plan", *plan, "--cluster", args.cluster, "--out", str(work / f"{name}.out"), "--emit",
                 str(work / f"{name}.emit"))
        loom_cmd(args, "profile", *plan, "--db", str(work / "empty-db.json"), "--device-name", args.device_name,
                 "--dry-run", "--requests", str(request))
        print(f"prepared {name}", flush=True)
    # ZeRO-Offload's copies on a GPU (pinned host memory, copies beside compute): the first config's graph with
    # its optimizer states on the host; its ops are the dp plan's, so it needs no requests of its own.
    first = next(iter(configs))
    offload = f"{first}-offload"
    configs[offload] = configs[first]
    plans[offload] = ["--graph", str(work / f"{first}.graph.json"), "--policy", "zero", "--zero", "1", "--gpus",
                      "1", "--offload", "optimizer"]
    loom_cmd(args, "plan", *plans[offload], "--cluster", args.cluster, "--out", str(work / f"{offload}.out"),
             "--emit", str(work / f"{offload}.emit"))
    sys.path.insert(0, str(ROOT / "bench" / "python"))
    import bench_oases

    oases_args = argparse.Namespace(loom=args.loom, model="gpt3-125m", layers=2, seq=256, batch=8)
    for overlap in ("none", "oases"):
        directory = work / f"tp2-{overlap}"
        directory.mkdir(exist_ok=True)
        try:
            bench_oases.plan(oases_args, directory, overlap)
        except subprocess.CalledProcessError as e:
            print(f"tp2 {overlap}: {e.stderr}", file=sys.stderr)
            raise
    (work / "requests.json").write_text(json.dumps({"requests": requests, "configs": configs, "plans": plans},
                                                   indent=1))


# --- device (the GPU machine) ---------------------------------------------------------------------------------

class Device:
    """cuda, or cpu for checking the phases here: synchronization and peak memory where the device has them."""

    def __init__(self, name):
        import torch

        self.name, self.torch = name, torch

    def synchronize(self):
        if self.name == "cuda":
            self.torch.cuda.synchronize()

    def reset_peak(self):
        if self.name == "cuda":
            self.torch.cuda.reset_peak_memory_stats()

    def peak_bytes(self):
        return self.torch.cuda.max_memory_allocated() if self.name == "cuda" else 0


def loom_side(emit, spec, module, dev):
    import torch

    from loom.runtime import results
    from loom.runtime.initial import module_state
    from loom.runtime.launch import load_manifest, run_rank

    manifest = load_manifest(emit)
    initial = module_state(module, manifest)
    steps = batches(spec, TIMED_STEPS)
    feed = [{"input_ids": ids, "labels": ids} for ids in steps]
    dev.reset_peak()
    timing = {}
    losses, _ = run_rank(emit, manifest, 0, device=dev.name, steps=TIMED_STEPS, initial=initial, batches=feed,
                         timing=timing)
    losses = [float(results.assemble(manifest, kept)[manifest["loss"]]) for kept in losses]
    # step_s: wall seconds per step, the device synchronized at its end (run_rank); the first builds the forms.
    return {"losses": losses[:EQUAL_STEPS], "step_s": statistics.median(timing["step_s"][1:]),
            "steps_s": timing["step_s"], "peak_bytes": dev.peak_bytes(),
            # host seconds per instruction kind over steps 2..N: what issuing the program costs the CPU
            "host_kinds": {kind: seconds for kind, (seconds, _) in timing["kinds"].items() if ":" not in kind}}


def torch_side(emit, spec, module, dev):
    import torch

    manifest = json.loads((pathlib.Path(emit) / "manifest.json").read_text())
    attrs = next(s["attrs"] for s in manifest["sub_ops"].values() if s["type"] == "adamw")
    model = module.to(dev.name).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=attrs["lr"], betas=(attrs["beta1"], attrs["beta2"]),
                                  eps=attrs["eps"], weight_decay=attrs["weight_decay"])
    steps = [ids.to(dev.name) for ids in batches(spec, TIMED_STEPS)]
    dev.reset_peak()
    losses, marks = [], []
    dev.synchronize()
    start = time.perf_counter()
    for ids in steps:
        optimizer.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))  # synchronizes: the step has ended
        marks.append(time.perf_counter())
    steps_s = [b - a for a, b in zip([start] + marks[:-1], marks)]
    return {"losses": losses[:EQUAL_STEPS], "step_s": statistics.median(steps_s[1:]), "steps_s": steps_s,
            "peak_bytes": dev.peak_bytes()}


def device(args):
    import gc
    import traceback

    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    work = pathlib.Path(args.work)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = Device(args.on)
    doc = {"device": torch.cuda.get_device_name() if args.on == "cuda" else "cpu", "torch": torch.__version__, "transformers": transformers.__version__,
           "configs": {}}
    index = json.loads((work / "requests.json").read_text())
    for request in index["requests"]:
        result = out / request.replace("requests", "results")
        subprocess.run([sys.executable, "-m", "loom_profile", str(work / request), "--out", str(result), "--quiet",
                        "--device", args.on], check=True)
        print(f"timed {request}", flush=True)
    for name, spec in index["configs"].items():
        emit = work / f"{name}.emit"
        row = {}
        for side, run in (("loom", loom_side), ("torch", torch_side)):
            torch.manual_seed(0)
            module = transformers.GPT2LMHeadModel(gpt2_config(spec))
            try:
                row[side] = run(emit, spec, module, dev)
            except Exception as e:  # noqa: BLE001 (recorded: the report says which side failed and why)
                row[side] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-3000:]}
            del module
            gc.collect()
            if args.on == "cuda":
                torch.cuda.empty_cache()
            print(f"{name} {side}: {json.dumps({k: v for k, v in row[side].items() if k != 'trace'})}", flush=True)
        doc["configs"][name] = row
    from loom.runtime import launch

    doc["nccl_tp2"] = {}
    for overlap in ("none", "oases"):
        try:
            scratch = pathlib.Path(tempfile.mkdtemp())  # values.pt is the whole model: not among the results
            losses, _ = launch.train(work / f"tp2-{overlap}" / "ranks", 4, device=args.on, timeout=30,
                                     out=scratch, timed=True)
            timing = launch.read_timing(scratch)
            step = statistics.median(max(rank["step_s"][s] for rank in timing) for s in range(1, 4))
            doc["nccl_tp2"][overlap] = {"losses": losses, "step_s": step}
        except Exception as e:  # noqa: BLE001 (expected with one GPU: recorded)
            doc["nccl_tp2"][overlap] = {"error": f"{type(e).__name__}: {str(e)[-1500:]}"}
        print(f"tp2 {overlap}: {json.dumps(doc['nccl_tp2'][overlap])[:600]}", flush=True)
    (out / "device.json").write_text(json.dumps(doc, indent=1))


# --- report (here) --------------------------------------------------------------------------------------------

def predicted(args, plan, profile):
    words = ["plan", *plan, "--cluster", args.cluster, "--json"]
    if profile:
        words += ["--profile", profile]
    summary = json.loads(loom_cmd(args, *words))
    return summary


def report(args):
    work = pathlib.Path(args.work)
    results = pathlib.Path(args.results)
    measured = json.loads((results / "device.json").read_text())
    index = json.loads((work / "requests.json").read_text())
    compare = {}
    for name in index["configs"]:
        result = results / f"{name}.results.json"
        if not result.exists():
            continue  # a variant of another config's ops
        plan = index["plans"][name]
        compare[name] = loom_cmd(args, "profile", *plan, "--db", args.db, "--results",
                                 str(result), "--compare")
    rows = []
    for name, row in measured["configs"].items():
        with_profile = predicted(args, index["plans"][name], args.db)
        roofline = predicted(args, index["plans"][name], None)
        rows.append({"config": name, "measured": row, "predicted_profile": pick(with_profile),
                     "predicted_roofline": pick(roofline)})
    doc = {"device": measured["device"], "torch": measured["torch"], "transformers": measured["transformers"],
           "rows": rows, "nccl_tp2": measured["nccl_tp2"]}
    if args.json:
        print(json.dumps(doc, indent=1))
        return
    print(f"device {doc['device']} (torch {doc['torch']}, transformers {doc['transformers']}), fp32, one GPU")
    for row in rows:
        loom, eager = row["measured"]["loom"], row["measured"]["torch"]
        print(f"\n{row['config']}")
        if "error" in loom or "error" in eager:
            print(f"  loom: {loom.get('error', 'ran')}\n  torch: {eager.get('error', 'ran')}")
            continue
        diff = max(abs(a - b) / abs(b) for a, b in zip(loom["losses"], eager["losses"]))
        print(f"  losses loom  {['%.6f' % v for v in loom['losses']]}")
        print(f"  losses torch {['%.6f' % v for v in eager['losses']]}  max rel diff {diff:.2e}")
        p, r = row["predicted_profile"], row["predicted_roofline"]
        print(f"  step  measured loom {loom['step_s'] * 1e3:.1f} ms, torch eager {eager['step_s'] * 1e3:.1f} ms; "
              f"predicted with the measured ops {p['step_s'] * 1e3:.1f} ms ({p['step_s'] / loom['step_s']:.2f}x "
              f"of loom's), roofline {r['step_s'] * 1e3:.1f} ms ({r['step_s'] / loom['step_s']:.2f}x)")
        print(f"  peak  measured loom {loom['peak_bytes'] / 2**30:.2f} GiB, torch eager "
              f"{eager['peak_bytes'] / 2**30:.2f} GiB; predicted {p['peak_bytes'] / 2**30:.2f} GiB "
              f"({p['peak_bytes'] / max(1, loom['peak_bytes']):.2f}x of loom's)")
    for overlap, result in doc["nccl_tp2"].items():
        print(f"\nNCCL tp 2, overlap {overlap}: {result.get('error') or '%.1f ms' % (result['step_s'] * 1e3)}")
    for name, text in compare.items():
        print(f"\n{name}: roofline / measured per op class\n{text}")


def pick(summary):
    """The step and peak memory of a `loom plan --json` summary."""
    summary = summary["summary"]
    return {"step_s": summary["step_time_s"], "peak_bytes": max(d["peak_bytes"] for d in summary["per_device"])}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", choices=["prepare", "device", "report"])
    parser.add_argument("--work", default="gpu_work")
    parser.add_argument("--out", help="device: where the measurements go")
    parser.add_argument("--results", help="report: the device phase's --out")
    parser.add_argument("--loom", default=str(ROOT / "build" / "loom"))
    parser.add_argument("--cluster", default="dgx-h200")
    parser.add_argument("--device-name", default="H200-SXM-141GB")
    parser.add_argument("--db", default=str(ROOT / "data" / "profiles" / "H200-SXM-141GB.json"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--tiny", action="store_true", help="prepare: one tiny GPT-2, to check the phases here")
    parser.add_argument("--on", default="cuda", choices=["cuda", "cpu"], help="device: where to run")
    args = parser.parse_args()
    {"prepare": prepare, "device": device, "report": report}[args.phase](args)


if __name__ == "__main__":
    main()
