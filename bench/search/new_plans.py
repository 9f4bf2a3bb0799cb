"""The hand-written new plans of issue 14 for the presets of auto_vs_baselines.py: what `auto` is compared
with beside the baselines ("within 2 % of the hand-written new plans, or faster", issue 15 acceptance line 3).

Each preset gets the candidates bench/papers/ runs for its paper's new plan (their exact policy flags, with
layer-wise recompute and the micro-batch size the papers' scripts use), and the fastest that fits is the
preset's new plan:
- Swin (nnScaler Table 9 and SuperScaler's Swin): coshard on the first four layers with nnScaler's tp, pp and
  parts per GPU count (nnscaler_fig7_swin.CELLS);
- T5 (nnScaler): the interlaced pipeline, pp 4 with nnScaler's tp per GPU count (nnscaler_fig8_t5.plans), at
  the preset's vocabulary (as the auto rows), explicit;
- AlphaFold2 at 16 and 32 GPUs: 3F1B with nnScaler's degrees (nnscaler_fig9_alphafold.plans; at 4 and 8 GPUs
  nnScaler runs plain dp, no new plan);
- GPT-3 16k and mBART (SuperScaler Table 2): SuperScaler's coshard-4 and interlaced candidates
  (superscaler_fig12.candidates);
- Oases Table III: the Oases schedule (`--overlap oases`, fine-grained recompute, the planner's per-layer tp:
  `--tp-layers auto`) over TMP degrees 4 and 8 (oases_table5.py's degrees).
`LACKS` names, per new plan, what of it auto's space (search/plan_space.h) does not hold (for the Oases
schedule, which it holds, why auto can still miss it).
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "papers"))
import nnscaler_fig7_swin  # noqa: E402
import nnscaler_fig8_t5  # noqa: E402
import nnscaler_fig9_alphafold  # noqa: E402
import superscaler_fig12  # noqa: E402

# The papers' scripts' recompute and micro-batch size (their COMMON less the dtype and batch the case sets).
RECOMPUTE = ["--recompute", "full"]
ONE_SAMPLE = ["--micro-batch-size", "1"]
OASES = ["--policy", "megatron", "--recompute", "full", "--overlap", "oases", "--tp-layers", "auto"]

LACKS = {
    "coshard": "coshard (tensor-parallel regions cut into parts run one after another and recomputed, --coshard)",
    "interlaced": "the interlaced pipeline (embeddings and head over every GPU, the layers staged: --policy interlaced)",
    "3f1b": "the 3F1B schedule of recycled passes (its pipelines run 1F1B, interleaved 1F1B or ZB-H1)",
    "oases": "the new plan's configuration among its finalists (the space holds --overlap oases; the planner's "
             "--tp-layers run on auto's best-ranked overlapped candidate only)",
}


def _kind(flags):
    if "--coshard" in flags:
        return "coshard"
    if "interlaced" in flags:
        return "interlaced"
    if "3f1b" in flags:
        return "3f1b"
    if "--overlap" in flags:
        return "oases"
    return None


def candidates(table, model_flags, gpus):
    """The new plan's candidate flag lists for one case ([] where issue 14 built none)."""
    model = model_flags[1] if model_flags[0] == "--model" else ""
    out = []
    if table == "Oases T3":
        return [[*OASES, "--tp", str(tp)] for tp in (4, 8)]
    if model.startswith("swin"):
        for g, _, tp, pp, parts, _ in nnscaler_fig7_swin.CELLS:
            if g == gpus:
                out.append(["--policy", "megatron", "--tp", str(tp), "--pp", str(pp), "--coshard", str(parts),
                            "--coshard-layers", "0:4", *RECOMPUTE, *ONE_SAMPLE])
    elif model.startswith("t5-"):
        for g, _, tp in nnscaler_fig8_t5.CELLS:
            if g == gpus:
                out.append([*nnscaler_fig8_t5.plans(g, tp)["nnScaler"], *RECOMPUTE, "--fold", "off"])
    elif model.startswith("alphafold2") and gpus >= 16:
        out.append([*nnscaler_fig9_alphafold.plans(gpus)["nnScaler"], *RECOMPUTE, *ONE_SAMPLE])
    elif model.startswith("gpt3-") or model.startswith("mbart"):
        figure = "gpt3" if model.startswith("gpt3-") else "mbart"
        out += [[*flags, *RECOMPUTE, *ONE_SAMPLE] for flags in superscaler_fig12.candidates(figure, gpus)["SuperScaler"]
                if _kind(flags)]
    return out


def best(results):
    """The fastest fitting result (else the smallest step), with its kind; None when none planned."""
    planned = [r for r in results if "step_s" in r]
    if not planned:
        return results[0] if results else None
    fitting = [r for r in planned if r["fits"]]
    return min(fitting or planned, key=lambda r: r["step_s"])


def kind_of(result):
    return _kind(result.get("flags", "").split())
