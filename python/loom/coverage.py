"""Coverage report (issue 5): which HuggingFace `transformers` model classes Loom traces and plans.

    python -m loom.coverage [--family causal-lm,seq2seq-lm,...] [--limit N] [--classes GPT2LMHeadModel,...]
                            [--match] [--loom build/loom] [--json out.json] [--capture auto|fx|export]

For every model class transformers maps to one of the task families (causal LM, seq-to-seq LM, image
classification, masked LM, sequence and token classification, question answering, multiple choice), and
for a few plain torch.nn models (loom.coverage_torch, family torch-nn): build it from its default config
shrunk (2 layers, hidden 64, 4 heads, vocabulary 512, 32x32 images; random init, nothing downloaded; an
image model that does not run on 32x32 images keeps its own image and patch sizes), trace it with its own
loss on a small batch (loom.trace; a class that takes no labels, such as DeiT's and LeViT's distillation
heads, with the cross entropy of its logits; a class whose trace fails without an attention mask, which
transformers makes itself only outside export, once more with a mask of ones), and plan the graph with the
engine twice, `loom plan --graph` under `--policy dp --gpus 2` and `--policy megatron --tp 2`.

With --match, every class that plans both ways is also trained one step under the dp 2, tp 2 and 1-device
plans and compared (loom.coverage_match: the tolerance, and when a step is compared in float64). --match takes
about 10 s a class on 2 cores. The shrunk configs are loom.coverage_configs', the batches and the models built
from them loom.coverage_inputs', the engine runs loom.coverage_engine's.

Prints one row per class (built? traced? planned dp? planned tp? matches? and the first failure's
reason) and the shares over the classes that build. A class that does not build from the shrunk config
is listed with its reason and left out of the shares. Planning is the engine's; this script only drives
it.
"""

import argparse
import contextlib
import io
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import warnings

from .coverage_engine import PLANS, engine_error, failure_reason, time_limit
from .coverage_engine import run_plan as _plan  # the name the export route's tests call  # noqa: F401
from .coverage_inputs import build_with_inputs, with_ones_mask
from .coverage_match import check_match, compare_training  # noqa: F401: check_match, the export tests' entry

FAMILIES = {  # family: transformers' mapping of its classes (torch-nn: loom.coverage_torch's hand-written models)
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "seq2seq-lm": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "image-classification": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "sequence-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "token-classification": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "question-answering": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "multiple-choice": "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES",
    "torch-nn": None,
}


def model_classes(families):
    """[(family, class name)] in transformers' mapping order, tuples of names flattened."""
    from transformers.models.auto import modeling_auto
    from .coverage_torch import MODELS
    found = []
    for family in families:
        if FAMILIES[family] is None:
            found += [(family, name) for name in MODELS]
            continue
        for _, names in getattr(modeling_auto, FAMILIES[family], {}).items():
            for name in (names if isinstance(names, (tuple, list)) else (names,)):
                if (family, name) not in found:  # one class may serve several model types
                    found.append((family, name))
    return found


def check_model(family, name, loom_binary, workdir, timeout=180, match=False, capture="auto"):
    """One row of the report: {family, model, built, traced, dp, tp, match, reason}; match is None when it
    was not checked (not asked, or the class does not plan both ways)."""
    import loom
    row = {"family": family, "model": name, "built": False, "traced": False, "dp": False, "tp": False,
           "match": None, "reason": ""}
    try:
        with time_limit(timeout):
            model, inputs, loss = build_with_inputs(family, name)
            row["built"] = True
            try:
                graph = loom.trace(model, inputs, loss=loss, capture=capture)
            except Exception as first:  # noqa: BLE001: once more with the mask export does not make itself
                masked = with_ones_mask(model, inputs)
                if masked is None:
                    raise
                try:
                    graph = loom.trace(model, masked, loss=loss, capture=capture)
                except Exception:  # noqa: BLE001: the row's reason is the first failure
                    raise first from None
                inputs = masked
            row["traced"] = True
    except Exception as e:  # noqa: BLE001: every failure is a row of the report
        row["reason"] = ("" if row["built"] else "does not build: ") + failure_reason(e)
        return row
    path = os.path.join(workdir, f"{name}.json")
    loom.save_graph(graph, path)
    for plan, options in PLANS.items():
        try:
            result = _plan(loom_binary, path, options, os.path.join(workdir, f"{name}-{plan}"), timeout)
        except subprocess.TimeoutExpired:
            row["reason"] = row["reason"] or f"plan {plan}: took longer than {timeout} s"
            continue
        except OSError as e:  # the engine binary missing or being relinked: this row's failure, not the run's
            row["reason"] = row["reason"] or f"plan {plan}: {e}"
            continue
        row[plan] = result.returncode == 0
        if not row[plan] and not row["reason"]:
            row["reason"] = f"plan {plan}: {engine_error(result)}"
    if match and row["dp"] and row["tp"]:
        row.update(compare_training(model, inputs, loss, path, loom_binary, workdir, name, timeout, capture))
    return row


FLOAT32 = " || float32: "  # in a progress line, before the float32 step's difference of a row compared in float64


def progress_line(row):
    """The line a run prints on stderr per class as it goes (loom.coverage_markdown reads a part cut short back
    from them): the stages, `float64` where the step was compared in float64, the reason, and the float32
    step's difference after FLOAT32."""
    line = (f"{row['family']:<21} {row['model']:<50} traced {row['traced']!s:<5} dp {row['dp']!s:<5} "
            f"tp {row['tp']!s:<5} match {row['match']!s:<5} ")
    if row.get("float64"):
        line += "float64 "
    if row.get("own_init"):
        line += "own_init "
    line += row["reason"]
    return line + (FLOAT32 + row["float32"] if row.get("float32") else "")


def summary(rows):
    built = [r for r in rows if r["built"]]
    n = len(built)
    count = lambda key: sum(1 for r in built if r[key])  # noqa: E731
    share = lambda k: f"{k}/{n} ({100.0 * k / n:.0f} %)" if n else "0/0"  # noqa: E731
    every = sum(1 for r in built if r["traced"] and r["dp"] and r["tp"])
    text = (f"{len(rows)} classes, {n} build from a small config; traced {share(count('traced'))}, "
            f"planned dp {share(count('dp'))}, planned tp {share(count('tp'))}; "
            f"traced and planned both ways {share(every)}")
    checked = [r for r in built if r.get("match") is not None]
    matched = count("match")
    if checked:
        text += f"; matches single-process training {share(matched)} ({matched} of the {len(checked)} checked"
        norms = sum(1 for r in checked if r.get("float64") and not r.get("float32"))
        rounding = sum(1 for r in checked if r.get("float64") and r.get("float32"))
        own = sum(1 for r in checked if r.get("own_init"))
        text += f"; {norms} with batch norm compared in float64" if norms else ""
        text += f"; {rounding} compared in float64 after float32 rounding differed" if rounding else ""
        text += f" ({own} of them from their own parameters)" if own else ""
        text += ")"
    return {"classes": len(rows), "built": n, "traced": count("traced"), "dp": count("dp"), "tp": count("tp"),
            "all": every, "match": matched, "checked": len(checked), "text": text}


def format_table(rows):
    width = max([len(r["model"]) for r in rows] + [5])
    mark = lambda ok, r: "yes" if ok else ("-" if not r["built"] or ok is None else "no")  # noqa: E731
    lines = [f"{'family':<21} {'model':<{width}} built traced dp  tp  match reason"]
    for r in rows:
        lines.append(f"{r['family']:<21} {r['model']:<{width}} {mark(r['built'], dict(r, built=True)):<5} "
                     f"{mark(r['traced'], r):<6} {mark(r['dp'], r):<3} {mark(r['tp'], r):<3} "
                     f"{mark(r.get('match'), r):<5} {r['reason']}")
    return "\n".join(lines)


def _default_loom():
    if os.environ.get("LOOM"):
        return os.environ["LOOM"]
    return str(pathlib.Path(__file__).resolve().parents[2] / "build" / "loom")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m loom.coverage", description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", "--families", dest="families", default=",".join(FAMILIES),
                        help=f"comma-separated, of: {', '.join(FAMILIES)} (default: all)")
    parser.add_argument("--classes", "--models", dest="models", default="",
                        help="comma-separated class names: only these, in this order (e.g. GPT2LMHeadModel)")
    parser.add_argument("--limit", type=int, default=0, help="check at most this many classes (0: all)")
    parser.add_argument("--loom", default=_default_loom(), help="the engine binary (default: $LOOM, else build/loom)")
    parser.add_argument("--timeout", type=int, default=180, help="seconds per class for tracing and each plan")
    parser.add_argument("--match", action="store_true",
                        help="also train one step of the dp 2, tp 2 and 1-device plans and compare (slower)")
    parser.add_argument("--json", default="", help="also write the rows and the shares to this file")
    parser.add_argument("--capture", default="auto", choices=("auto", "fx", "export"),
                        help="loom.trace's capture route (default: its own, auto)")
    args = parser.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        parser.error(f"--family: unknown {', '.join(unknown)}; choose from {', '.join(FAMILIES)}")
    if not os.path.exists(args.loom):
        parser.error(f"--loom: no engine binary at {args.loom}; build it (make build) or pass --loom PATH")
    import transformers
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    classes = model_classes(families)
    if args.models:
        wanted = set(args.models.split(","))
        missing = wanted - {name for _, name in classes}
        if missing:
            parser.error(f"--classes: {', '.join(sorted(missing))} not in the families {', '.join(families)}")
        order = {name: k for k, name in enumerate(args.models.split(","))}  # the order given: the first run first
        classes = sorted(((f, n) for f, n in classes if n in wanted), key=lambda fn: order[fn[1]])
    if args.limit > 0:
        classes = classes[:args.limit]
    rows, start = [], time.monotonic()
    with tempfile.TemporaryDirectory(prefix="loom-coverage-") as workdir:
        for family, name in classes:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                row = check_model(family, name, args.loom, workdir, args.timeout, args.match, args.capture)
            rows.append(row)
            print(progress_line(row), file=sys.stderr, flush=True)
    print(format_table(rows))
    totals = summary(rows)
    print(totals["text"])
    print(f"checked {len(rows)} classes in {time.monotonic() - start:.0f} s")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"rows": rows, "summary": totals}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
