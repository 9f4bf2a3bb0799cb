"""The new plans (zero-bubble, DualPipeV, interlaced, coshard, Oases) and the standard ones train on CUDA as torch
trains the module on CUDA: the gloo equivalence suite's cases (python/tests/test_torch_reference.py) run on a GPU.
Three phases, because the engine plans here and the GPU sits on another machine (the device tool's: CUDA torch and
transformers, not the engine):

    PYTHONPATH=python:build/python .venv/bin/python bench/python/bench_gpu_plans.py prepare --work .gpu/plans
    # on the GPU machine, with .gpu/plans and python/ copied along:
    PYTHONPATH=python python3 bench/python/bench_gpu_plans.py device --work .gpu/plans --out RESULTS_DIR
    PYTHONPATH=python:build/python .venv/bin/python bench/python/bench_gpu_plans.py report --work .gpu/plans \\
        --results RESULTS_DIR [--json]

prepare: builds the suite's transformers models (its configs, seeds and batches), captures each, plans every case
(`loom plan --graph G --dtype f32 <the suite's plan and optimizer flags> --emit`), and saves each model's config,
initial weights and batches, so the GPU machine (another transformers version) rebuilds the same module.

device: per model and optimizer, torch's own 3 steps on CUDA from those weights (torch.optim, fp32 matmuls at full
precision: torch's default, no TF32); per case, the generated program's 3 steps on CUDA (`loom.runtime.launch.train`,
`--device cuda`; a multi-rank plan's ranks share the one GPU over gloo: NCCL refuses two ranks on one device).
Everything is saved to one file, compared here.

report: the suite's own comparison (test_torch_reference.parameter_errors: loss and every parameter at rtol 1e-5,
AdamW's tiny-gradient elements held to Adam's bound) of each case on CUDA, beside the same case's torch CPU run.
"""

import argparse
import json
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1].parent
sys.path.insert(0, str(ROOT / "python"))

# (model, plan, optimizer), plan names of test_torch_reference.PLANS: every new plan, and the standard plans they
# build on (dp x tp on 4 ranks, 1F1B, interleaving, sequence parallelism, ZeRO-3).
CASES = [
    ("gpt2", "single", "adamw"), ("gpt2", "dp2xtp2", "adamw"), ("gpt2", "pp2-1f1b", "adamw"),
    ("llama", "pp2-interleaved", "sgd"), ("gpt2", "tp2-sp", "sgd"), ("llama", "zero3", "adamw"),
    ("gpt2", "pp2-zbh1", "adamw"), ("llama", "pp2-zbh2", "sgd"), ("llama", "pp2-zbv", "adamw"),
    ("llama", "pp2-dualpipev", "sgd"), ("t5", "pp2-interlaced", "adamw"),
    ("gpt2", "tp2-coshard2", "adamw"), ("gpt2", "coshard2-recompute-full", "adamw"),
    ("gpt2", "tp2-coshard2-recompute-collectives", "sgd"),
    ("gpt2", "tp2-oases", "adamw"), ("llama", "tp2-oases", "sgd"), ("llama", "pp2xtp2-oases", "adamw"),
]
STEPS = 3


def reference_suite():
    sys.path.insert(0, str(ROOT / "python" / "tests"))
    import test_torch_reference

    return test_torch_reference


def case_name(model, plan, optimizer):
    return f"{model}.{plan}.{optimizer}"


# --- prepare (here) -------------------------------------------------------------------------------------------

def prepare(args):
    import shutil
    import subprocess

    import torch

    import loom

    suite = reference_suite()
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    models = {}
    for model in sorted({m for m, _, _ in CASES}):
        module, batches = suite.build_model(model), suite.make_batches(model)
        graph = work / f"{model}.graph.json"
        loom.save_graph(loom.trace(module, batches[0], capture="export"), graph)
        torch.save({"state": module.state_dict(), "batches": batches}, work / f"{model}.module.pt")
        models[model] = {"class": type(module).__name__, "config_class": type(module.config).__name__,
                         "config": module.config.to_dict()}
        print(f"captured {model}", flush=True)
    cases = []
    for model, plan, optimizer in CASES:
        name = case_name(model, plan, optimizer)
        result = subprocess.run([args.loom, "plan", "--graph", str(work / f"{model}.graph.json"), "--dtype", "f32",
                                 *suite.PLANS[plan], *suite.OPTIMIZERS[optimizer][0], "--out", str(work / f"{name}.out"),
                                 "--emit", str(work / f"{name}.emit")], capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"planning {name} failed:\n{result.stdout}{result.stderr}")
        shutil.rmtree(work / f"{name}.out")  # the plan's reports: not needed there (the tree travels, 64 MiB)
        cases.append({"name": name, "model": model, "plan": plan, "optimizer": optimizer})
        print(f"planned {name}", flush=True)
    (work / "cases.json").write_text(json.dumps({"models": models, "cases": cases}, indent=1))


# --- device (the GPU machine) ---------------------------------------------------------------------------------

# torch.optim twins of the engine's optimizer flags (test_torch_reference.OPTIMIZERS; kept here because the GPU
# machine runs this file without the test suite's conftest).
TORCH_OPTIMIZERS = {
    "adamw": lambda torch, params: torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                                                     foreach=False),
    "sgd": lambda torch, params: torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=False),
}
TINY = 1e-4  # test_torch_reference.TINY: the tiny-gradient mask's threshold


def rebuild(work, model, spec):
    """The prepared module on this machine's transformers: its config class, its weights."""
    import torch
    import transformers

    config = getattr(transformers, spec["config_class"]).from_dict(spec["config"])
    module = getattr(transformers, spec["class"])(config)
    saved = torch.load(work / f"{model}.module.pt", weights_only=False)
    module.load_state_dict(saved["state"], strict=True)
    return module, saved["batches"]


def torch_steps(torch, module, batches, optimizer, device):
    """torch's own STEPS steps of a copy on `device`: losses, final values (CPU), tiny-gradient masks (CPU)."""
    import copy

    reference = copy.deepcopy(module).to(device)
    optim = TORCH_OPTIMIZERS[optimizer](torch, reference.parameters())
    losses, tiny = [], {}
    for batch in batches:
        loss = reference(**{k: v.to(device) for k, v in batch.items()}).loss
        losses.append(loss.item())
        loss.backward()
        for name, p in reference.named_parameters():
            g = p.grad.abs()
            mask = (g <= TINY * g.max()).cpu()
            tiny[name] = mask if name not in tiny else tiny[name] | mask
        optim.step()
        optim.zero_grad()
    return losses, {n: p.detach().cpu().clone() for n, p in reference.named_parameters()}, tiny


def device(args):
    import torch
    import transformers

    from loom.runtime.initial import module_state
    from loom.runtime.launch import load_manifest, train

    work, out = pathlib.Path(args.work), pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = json.loads((work / "cases.json").read_text())
    where = args.on
    info = {"torch": torch.__version__, "transformers": transformers.__version__,
            "device": torch.cuda.get_device_name() if where == "cuda" else "cpu",
            "tf32": torch.backends.cuda.matmul.allow_tf32}
    print(json.dumps(info), flush=True)
    modules, torch_runs, runs = {}, {}, {}
    for model, spec in doc["models"].items():
        modules[model] = rebuild(work, model, spec)
    for case in doc["cases"]:
        model, optimizer = case["model"], case["optimizer"]
        module, batches = modules[model]
        if (model, optimizer) not in torch_runs:
            torch_runs[(model, optimizer)] = torch_steps(torch, module, batches, optimizer, where)
        emit = work / f"{case['name']}.emit"
        manifest = load_manifest(emit)
        start = time.monotonic()
        try:
            losses, values = train(emit, STEPS, device=where, backend="gloo", initial=module_state(module, manifest),
                                   batches=batches, timeout=180, out=pathlib.Path("/tmp") / f"gpu-plans-{case['name']}")
            runs[case["name"]] = {"losses": losses, "values": {k: v.cpu() for k, v in values.items()
                                                               if k.endswith(".updated")}}
            status = f"losses {' '.join(f'{x:.7g}' for x in losses)}"
        except Exception as e:  # noqa: BLE001 (recorded and reported; the other cases still run)
            runs[case["name"]] = {"error": f"{type(e).__name__}: {e}"[-2000:]}
            status = runs[case["name"]]["error"][-300:]
        print(f"{case['name']} ({manifest['world_size']} ranks, {time.monotonic() - start:.1f} s): {status}", flush=True)
    torch.save({"info": info, "runs": runs,
                "torch": {f"{m}.{o}": value for (m, o), value in torch_runs.items()}}, out / "gpu_plans.pt")


# --- report (here) --------------------------------------------------------------------------------------------

def report(args):
    import torch

    suite = reference_suite()
    work = pathlib.Path(args.work)
    doc = json.loads((work / "cases.json").read_text())
    got = torch.load(pathlib.Path(args.results) / "gpu_plans.pt", weights_only=False)
    rows = []
    for case in doc["cases"]:
        run = got["runs"].get(case["name"], {"error": "not run"})
        want_losses, want, tiny = got["torch"][f"{case['model']}.{case['optimizer']}"]
        row = {"case": case["name"], "ranks": None}
        if "error" in run:
            row.update(equal=False, error=run["error"])
        else:
            loss_rel = max(abs(a - b) / abs(b) for a, b in zip(run["losses"], want_losses))
            rel, where, exempt, total = suite.parameter_errors(run["values"], want, tiny, case["optimizer"])
            row.update(losses=run["losses"], torch_losses=want_losses, loss_rel=loss_rel, param_rel=rel,
                       worst=where, exempt=exempt, elements=total,
                       equal=loss_rel <= suite.RTOL and rel <= suite.RTOL)
        rows.append(row)
    summary = {"info": got["info"], "cases": len(rows), "equal": sum(r["equal"] for r in rows), "rows": rows}
    if args.json:
        print(json.dumps(summary, indent=1))
        return
    print(f"{got['info']}")
    print("| case | loom losses | torch losses | max loss rel | worst parameter rel | equal at 1e-5 |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['case']} | {r['error'][:120]} | | | | no |")
            continue
        print(f"| {r['case']} | {' '.join(f'{x:.7g}' for x in r['losses'])} | "
              f"{' '.join(f'{x:.7g}' for x in r['torch_losses'])} | {r['loss_rel']:.1e} | "
              f"{r['param_rel']:.1e} ({r['worst']}) | {'yes' if r['equal'] else 'NO'} |")
    print(f"equal to torch on {got['info']['device']}: {summary['equal']} of {summary['cases']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="phase", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--work", required=True)
    p.add_argument("--loom", default=str(ROOT / "build" / "loom"))
    d = sub.add_parser("device")
    d.add_argument("--work", required=True)
    d.add_argument("--out", required=True)
    d.add_argument("--on", choices=["cuda", "cpu"], default="cuda", help="cpu: a check of the phases here")
    r = sub.add_parser("report")
    r.add_argument("--work", required=True)
    r.add_argument("--results", required=True)
    r.add_argument("--json", action="store_true")
    args = parser.parse_args()
    {"prepare": prepare, "device": device, "report": report}[args.phase](args)


if __name__ == "__main__":
    main()
