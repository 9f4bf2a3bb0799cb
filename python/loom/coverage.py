"""Coverage report (issue 5): which HuggingFace `transformers` model classes Loom traces and plans.

    python -m loom.coverage [--family causal-lm,seq2seq-lm,...] [--limit N] [--classes GPT2LMHeadModel,...]
                            [--match] [--loom build/loom] [--json out.json] [--capture auto|fx|export]

For every model class transformers maps to one of the task families (causal LM, seq-to-seq LM, image
classification, masked LM, sequence and token classification, question answering, multiple choice), and
for a few plain torch.nn models (loom.coverage_torch, family torch-nn): build it from its default config
shrunk (2 layers, hidden 64, 4 heads, vocabulary 512, 32x32 images; random init, nothing downloaded; an
image model that does not run on 32x32 images keeps its own image and patch sizes), trace it with its own
loss on a small batch (loom.trace; a class that takes no labels, such as DeiT's and LeViT's distillation
heads, with the cross entropy of its logits), and plan the graph with the
engine twice, `loom plan --graph` under `--policy dp --gpus 2` and `--policy megatron --tp 2`.

With --match, every class that plans both ways is also trained: the dp 2 and tp 2 plans and the
1-device plan are emitted (`--emit`) and run one step (loom.runtime.launch.train, gloo), and the class
matches when the loss and every updated parameter of both parallel runs equal the 1-device run's: per
tensor, max |difference| <= 1e-5 x max(max |reference|, 1e-3 x the largest value among the compared
tensors). The step is SGD with learning rate 1, so an updated parameter is the parameter minus its whole
gradient: a wrong gradient shows. (One Adam step would turn rounding noise in a gradient that is exactly
zero, e.g. of the key bias, which softmax ignores, into a step of the learning rate's size with a random
sign; the floor lets such noise pass, not a real error.) Images come 8 a batch. A class with a
training-mode batch norm is compared in float64 (the model traced again in float64, the same three plans
of that graph trained, the same tolerance): its float32 step divides by a small batch's variance, so
float32 rounding alone moves the 1-device and dp steps apart by more than RTOL (the engine's losses are
float32 scalars: in float64 graphs the loss is computed in float32 and cast). --match takes about 10 s a
class on 2 cores.

Prints one row per class (built? traced? planned dp? planned tp? matches? and the first failure's
reason) and the shares over the classes that build. A class that does not build from the shrunk config
is listed with its reason and left out of the shares. Planning is the engine's; this script only drives
it.
"""

import argparse
import contextlib
import inspect
import io
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import warnings

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
PLANS = {
    "dp": ["--policy", "dp", "--gpus", "2"],
    "tp": ["--policy", "megatron", "--tp", "2", "--gpus", "2"],
}
SINGLE = ["--policy", "dp", "--dp", "1", "--gpus", "1"]  # the reference the parallel plans must train as
MATCH_STEP = ["--optimizer", "sgd", "--lr", "1"]  # the updated parameters carry the whole gradients
RTOL, FLOOR = 1e-5, 1e-3
BATCH, SEQ, TARGET_SEQ, IMAGE, VOCAB, LABELS, CHOICES = 2, 16, 8, 32, 512, 10, 2
# Images come 8 a batch: training-mode batch norm divides by the batch's variance, and at 2 images a
# float32 step (torch's own, 1 device) is already ~1e-3 off the exact one, so 1 device and dp 2 could not
# be compared at RTOL; at 8 they agree to ~2e-6 where the gradients are right.
IMAGE_BATCH = 8

# Config fields shrunk where a config has them as integers (lists: each element).
_SMALL = {
    2: ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers", "decoder_layers",
        "num_decoder_layers", "num_key_value_heads", "num_self_attends_per_block"),
    64: ("hidden_size", "n_embd", "d_model", "dim", "embed_dim", "word_embed_proj_dim", "d_latents"),
    4: ("num_attention_heads", "n_head", "n_heads", "encoder_attention_heads", "decoder_attention_heads",
        "num_self_attention_heads"),
    # Perceiver's cross-attention reads its preprocessor's channels (261 with Fourier positions, 322
    # after its conv): one head divides every width.
    1: ("num_cross_attention_heads",),
    128: ("intermediate_size", "n_inner", "ffn_dim", "d_ff", "encoder_ffn_dim", "decoder_ffn_dim"),
    16: ("head_dim", "d_kv", "kv_channels", "num_latents"),
    8: ("rotary_dim",),  # half the head: both the rotated and the passed-through parts are non-empty
}
_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
              "cls_token_id", "unk_token_id", "mask_token_id")


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


def shrink(config, family, image_sizes=True):
    """The config made small in place: few layers, small widths, a small vocabulary, small images (with
    image_sizes; else the image and patch sizes stay the config's)."""
    for value, fields in _SMALL.items():
        for field in fields:
            if isinstance(getattr(config, field, None), int) and not isinstance(getattr(config, field), bool):
                with contextlib.suppress(NotImplementedError, AttributeError):  # some configs refuse an alias
                    setattr(config, field, value)
    if isinstance(getattr(config, "vocab_size", None), int):
        config.vocab_size = VOCAB
        if isinstance(getattr(config, "decoder_vocab_size", None), int):  # Marian's target vocabulary
            config.decoder_vocab_size = VOCAB
        for field in _TOKEN_IDS:  # special tokens of the full vocabulary would index past the small one
            if isinstance(getattr(config, field, None), int) and getattr(config, field) >= VOCAB:
                setattr(config, field, _TOKEN_IDS.index(field))
    if family in ("seq2seq-lm", "sequence-classification"):
        # seq2seq shifts labels right with it (T5's docs: "usually the pad token"); a sequence classifier
        # finds each row's last token by it ("Cannot handle batch sizes > 1 if no padding token is defined")
        if getattr(config, "pad_token_id", 0) is None:
            config.pad_token_id = 0
        if getattr(config, "decoder_start_token_id", 0) is None:
            config.decoder_start_token_id = config.pad_token_id
    if getattr(config, "is_encoder_decoder", False) and getattr(config, "decoder_start_token_id", None) is None:
        config.decoder_start_token_id = getattr(config, "pad_token_id", None) or 0  # T5 outside seq2seq-lm
    if getattr(config, "attention_type", None) == "block_sparse":
        # BigBird switches to full attention by itself when the sequence is this short (with a warning,
        # replacing its attention modules mid-forward, which a trace cannot follow): full from the start.
        config.attention_type = "original_full"
    if isinstance(getattr(config, "qk_rope_head_dim", None), int):
        # Multi-head latent attention (DeepSeek V2/V3, MiniCPM3): head_dim is the rotary part, so the
        # rotary, plain and value parts and the low-rank projections shrink with it; keys get every head.
        rope = config.head_dim if isinstance(getattr(config, "head_dim", None), int) else 16
        for field, size in (("qk_rope_head_dim", rope), ("qk_nope_head_dim", 16), ("v_head_dim", 16),
                            ("qk_head_dim", rope + 16), ("kv_lora_rank", 32), ("q_lora_rank", 32)):
            if isinstance(getattr(config, field, None), int):
                with contextlib.suppress(NotImplementedError, AttributeError):
                    setattr(config, field, size)
        if isinstance(getattr(config, "num_key_value_heads", None), int):  # keys have every head: no groups
            config.num_key_value_heads = config.num_attention_heads
    if isinstance(getattr(config, "max_position_embeddings", None), int):
        config.max_position_embeddings = min(config.max_position_embeddings, 128)
    if "head_dim" in vars(config) and config.head_dim is None and isinstance(getattr(config, "hidden_size", None), int) \
            and isinstance(getattr(config, "num_attention_heads", None), int):
        config.head_dim = config.hidden_size // config.num_attention_heads  # Ministral reads a None head_dim as is
    if getattr(config, "num_experts_per_tok", 0) is None and any(
            isinstance(getattr(config, f, None), int) for f in ("n_routed_experts", "num_experts", "num_local_experts")):
        config.num_experts_per_tok = 2  # DeepSeek-V2's default config routes to None experts: topk(k=None)
    for field in ("layerdrop", "encoder_layerdrop", "decoder_layerdrop"):
        # LayerDrop skips a layer when a random draw says so (`if torch.rand([]) < p`): control flow on data,
        # which torch.export refuses and a fixed plan cannot hold; the step is captured without it.
        if isinstance(getattr(config, field, None), float):
            setattr(config, field, 0.0)
    if family in ("sequence-classification", "token-classification"):
        config.num_labels = LABELS
    if family == "image-classification":
        if isinstance(getattr(config, "image_size", None), int) and image_sizes:
            config.image_size = IMAGE
        if isinstance(getattr(config, "patch_size", None), int) and image_sizes:
            config.patch_size = min(config.patch_size, 8)
        for field in ("hidden_sizes", "embed_dims", "neck_hidden_sizes"):
            sizes = getattr(config, field, None)
            if isinstance(sizes, (list, tuple)) and all(isinstance(s, int) for s in sizes):  # tuples: transformers 5
                setattr(config, field, [16 * 2 ** min(k, 2) for k in range(len(sizes))])
        for field in ("num_heads", "num_attention_heads"):  # per stage: 2 divides every shrunk width
            heads = getattr(config, field, None)
            if isinstance(heads, (list, tuple)) and all(isinstance(h, int) for h in heads):
                setattr(config, field, [2] * len(heads))
        depths = getattr(config, "depths", None)
        if isinstance(depths, (list, tuple)) and all(isinstance(d, int) for d in depths):
            config.depths = [1] * len(depths)
        stages = getattr(config, "num_stages", None)
        if isinstance(stages, int):  # ConvNeXt's num_hidden_layers is its num_stages: per-stage lists follow it
            for field in ("hidden_sizes", "depths", "num_heads", "num_attention_heads"):
                values = getattr(config, field, None)
                if isinstance(values, list) and len(values) > stages:
                    setattr(config, field, values[:stages])
        config.num_labels = LABELS
    for sub in ("text_config", "vision_config", "encoder", "decoder"):
        inner = getattr(config, sub, None)
        if inner is not None and hasattr(inner, "to_dict"):
            shrink(inner, family, image_sizes)
    return config


_WIDTH_WORDS = ("hidden", "dim", "embed", "width", "bottleneck")
_NOT_WIDTH_WORDS = ("position", "vocab", "image", "patch", "chunk", "window", "layers")
_NARROWER_WIDTHS = ("embedding_size", "bottleneck_size", "true_hidden_size")  # at most the hidden size


def _tie_widths(before, after):
    """In `after` (a config's dict shrunk, sub configs as dicts), in place: every width field that shrinking
    left alone and that held the default's hidden size (a pooler's, a cross attention's, an embedding's), or
    a narrower width that is now wider than the shrunk hidden size (MobileBERT's 128-wide embeddings and
    bottlenecks under a 512 hidden size: its head projects hidden - embedding), takes the shrunk hidden
    size; sub configs likewise."""
    width, small = before.get("hidden_size"), after.get("hidden_size")
    for key, value in before.items():
        if isinstance(value, dict) and isinstance(after.get(key), dict):
            _tie_widths(value, after[key])
        elif (isinstance(width, int) and isinstance(small, int) and key != "hidden_size" and isinstance(value, int)
              and not isinstance(value, bool) and after.get(key) == value
              and (value == width or (small < value < width and key.endswith(_NARROWER_WIDTHS)))
              and any(w in key.lower() for w in _WIDTH_WORDS) and not any(w in key.lower() for w in _NOT_WIDTH_WORDS)):
            after[key] = small


def _tie_layers_and_heads(before, after):
    """In `after`, in place, per config and sub config: a per-layer list (layer_types, layers_block_type) the
    default sized to its layer count keeps as many entries as the shrunk layer count, every kind of layer
    kept where it fits (the first of each kind, then the first others, in order); key-value heads that
    equalled the attention heads (no grouped queries) still do."""
    layers, small = before.get("num_hidden_layers"), after.get("num_hidden_layers")
    for key, value in before.items():
        if isinstance(value, dict) and isinstance(after.get(key), dict):
            _tie_layers_and_heads(value, after[key])
        elif (isinstance(layers, int) and isinstance(small, int) and small < layers and isinstance(value, list)
              and len(value) == layers and after.get(key) == value):
            firsts = sorted({repr(v): i for i, v in reversed(list(enumerate(value)))}.values())[:small]
            keep = sorted(firsts + [i for i in range(layers) if i not in firsts][:small - len(firsts)])
            after[key] = [value[i] for i in keep]
    heads = ("num_key_value_heads", "num_attention_heads")
    if all(isinstance(before.get(k), int) and isinstance(after.get(k), int) for k in heads) and \
            before[heads[0]] == before[heads[1]]:
        after[heads[0]] = after[heads[1]]


def shrunk_config(config_class, family, image_sizes=True):
    """The class's default config shrunk (see shrink), then built again by its constructor from the fields
    shrinking changed: fields its __init__ derives from them (Zamba's attention width, a Mamba head's
    width, per-layer type lists, the dt rank) are derived from the small values instead of staying the full
    model's; widths that equalled the default hidden size follow the small one (_tie_widths); per-layer lists
    and ungrouped key-value heads follow the layer and head counts (_tie_layers_and_heads, which config
    validators of transformers 5 check); Mamba-2 heads times their width is expand x hidden
    (_tie_state_space_heads). A constructor that refuses the changed
    fields leaves the config shrunk field by field."""
    default, small = config_class(), shrink(config_class(), family, image_sizes)
    before, after = default.to_dict(), small.to_dict()
    _tie_widths(before, after)
    _tie_layers_and_heads(before, after)
    _tie_state_space_heads(after)
    changed = {k: v for k, v in after.items() if before.get(k) != v and not k.startswith("_")}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rebuilt = config_class(**changed)
    except Exception:  # noqa: BLE001: some constructors validate against fields we did not change
        return small
    return rebuilt


# (heads, head width) of a state-space (Mamba-2) mixer, whose product must be expand x hidden.
_STATE_SPACE_HEADS = (("num_heads", "head_dim", "expand"), ("mamba_n_heads", "mamba_d_head", "mamba_expand"),
                      ("n_mamba_heads", "mamba_headdim", "mamba_expand"))


def _tie_state_space_heads(config):
    """In `config` (a dict), in place: Mamba-2 heads x head width = expand x hidden, 8 heads where 8 divide
    it (groups that would not divide the heads become 1)."""
    hidden = config.get("hidden_size")
    for heads, width, expand in _STATE_SPACE_HEADS:
        if not all(isinstance(config.get(k), int) for k in (heads, width, expand)) or not isinstance(hidden, int):
            continue
        inner = config[expand] * hidden
        count = 8 if inner % 8 == 0 else 1
        config[heads], config[width] = count, inner // count
        for groups in ("n_groups", "mamba_n_groups", "mamba_ngroups"):
            if isinstance(config.get(groups), int) and count % config[groups]:
                config[groups] = 1


def example_inputs(config, family, cls=None):
    import torch
    generator = torch.Generator().manual_seed(0)
    takes = inspect.signature(cls.forward).parameters if cls is not None else {}
    if family == "image-classification" and "pixel_values" not in takes and "input_ids" in takes:
        # ImageGPT classifies images given as sequences of colour-cluster ids.
        vocab = getattr(config, "vocab_size", VOCAB) or VOCAB
        return {"input_ids": torch.randint(0, vocab, (BATCH, SEQ), generator=generator),
                "labels": torch.randint(0, LABELS, (BATCH,), generator=generator)}
    if family == "image-classification":
        channels, size = getattr(config, "num_channels", 3), getattr(config, "loom_image_size", IMAGE)
        return {"pixel_values": torch.randn(IMAGE_BATCH, channels, size, size, generator=generator),
                "labels": torch.randint(0, LABELS, (IMAGE_BATCH,), generator=generator)}
    vocab = getattr(config, "vocab_size", VOCAB) or VOCAB
    ids = torch.randint(len(_TOKEN_IDS), vocab, (BATCH, SEQ), generator=generator)
    if family == "sequence-classification":
        return {"input_ids": ids, "labels": torch.randint(0, LABELS, (BATCH,), generator=generator)}
    if family == "token-classification":
        return {"input_ids": ids, "labels": torch.randint(0, LABELS, (BATCH, SEQ), generator=generator)}
    if family == "question-answering":  # the answer span's first and last token
        start = torch.randint(0, SEQ // 2, (BATCH,), generator=generator)
        return {"input_ids": ids, "start_positions": start, "end_positions": start + SEQ // 4}
    if family == "multiple-choice":  # [batch, choices, tokens], the label the right choice
        return {"input_ids": torch.randint(len(_TOKEN_IDS), vocab, (BATCH, CHOICES, SEQ), generator=generator),
                "labels": torch.randint(0, CHOICES, (BATCH,), generator=generator)}
    if family == "seq2seq-lm" and (cls is None or "decoder_input_ids" in takes):
        # The decoder's inputs are the labels shifted right, given as data (as seq2seq data loaders do).
        labels = torch.randint(len(_TOKEN_IDS), vocab, (BATCH, TARGET_SEQ), generator=generator)
        start = getattr(config, "decoder_start_token_id", None)
        start = start if isinstance(start, int) else 0
        decoder_ids = torch.cat([torch.full((BATCH, 1), start), labels[:, :-1]], dim=1)
        return {"input_ids": ids, "decoder_input_ids": decoder_ids, "labels": labels}
    # Past here: one token sequence and its labels (causal LMs; the speech-to-text classes transformers maps
    # as seq2seq whose text side is a decoder alone, with no decoder_input_ids, read them so).
    codebooks = getattr(config, "num_codebooks", None)
    if isinstance(codebooks, int) and "input_ids" in takes:
        # MusicGen's decoder reads one row of audio codes per codebook: input_ids [batch x codebooks, seq],
        # labels [batch, seq, codebooks] (its docs).
        codes = torch.randint(0, vocab, (BATCH, SEQ, codebooks), generator=generator)
        return {"input_ids": codes.permute(0, 2, 1).reshape(BATCH * codebooks, SEQ), "labels": codes}
    return {"input_ids": ids, "labels": ids}


def _build(cls, family):
    """(model, config) of `cls` from its shrunk default config, in training mode. An image model whose
    stages do not fit 32x32 images (windows, attention biases and patch grids sized for its own image
    size) keeps its default image and patch sizes, when it then runs."""
    import torch
    config = shrunk_config(cls.config_class, family)
    torch.manual_seed(0)
    model = cls(config)
    if family == "image-classification":
        try:
            with torch.no_grad():
                model(**example_inputs(config, family, cls))
        except Exception:  # noqa: BLE001: retried at its own sizes; that failing is the class's failure
            default = cls.config_class()
            config = shrunk_config(cls.config_class, family, image_sizes=False)
            global_image = getattr(default, "image_size", IMAGE)
            torch.manual_seed(0)
            model = cls(config)
            config.loom_image_size = global_image if isinstance(global_image, int) else IMAGE
    model.train()
    if hasattr(model, "set_default_language"):  # X-MOD's adapters need a language (its docs: en_XX)
        model.set_default_language("en_XX")
    return model, config


def _classification_loss(outputs, batch):
    """For a class that takes no labels (DeiT and LeViT with a distillation head, whose loss is the
    teacher's): cross entropy of its logits, the loss its fine-tuning head is trained with."""
    import torch.nn.functional as F
    return F.cross_entropy(outputs["logits"], batch["labels"])


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds):
    def expire(signum, frame):
        raise _Timeout(f"took longer than {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _reason(error):
    import loom
    if isinstance(error, loom.UnsupportedOpsError):
        return "unsupported: " + ", ".join(error.unsupported)
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {first}"[:300]


def _engine_error(result):
    lines = (result.stderr + "\n" + result.stdout).strip().splitlines()
    for line in lines:
        if "error" in line.lower():
            return line.strip()[:300]
    return (lines[0].strip() if lines else f"exit status {result.returncode}")[:300]


def worst_error(reference, candidate):
    """(max relative error, tensor name) over every tensor of the reference run (the loss and the updated
    parameters): max |difference| / max(max |reference|, FLOOR x the largest reference value of all); a
    tensor missing from the candidate, or of another shape, is infinitely off."""
    largest = max((want.abs().max().item() for want in reference.values() if want.numel()), default=0.0)
    worst = (0.0, "")
    for name, want in reference.items():
        got = candidate.get(name)
        if got is None or got.shape != want.shape:
            return float("inf"), name
        want = want.double()
        scale = max(want.abs().max().item() if want.numel() else 0.0, FLOOR * largest, 1e-30)
        rel = (got.double() - want).abs().max().item() / scale if want.numel() else 0.0
        if rel != rel:  # NaN: as far off as a missing tensor
            return float("inf"), name
        if rel >= worst[0]:
            worst = (rel, name)
    return worst


def _plan(loom_binary, path, options, out, timeout, emit=None):
    command = [loom_binary, "plan", "--graph", path, *options, "--out", out] + (["--emit", emit] if emit else [])
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def check_match(loom_binary, path, workdir, name, timeout=180):
    """'' when one AdamW step of the dp and tp plans (gloo) equals the 1-device plan's step, else why not."""
    from loom.runtime.launch import LaunchError, train
    results = {}
    for plan, options in {"single": SINGLE, **PLANS}.items():
        emit = os.path.join(workdir, f"{name}-{plan}-emit")
        try:
            result = _plan(loom_binary, path, options + MATCH_STEP, os.path.join(workdir, f"{name}-{plan}-out"),
                           timeout, emit)
        except subprocess.TimeoutExpired:
            return f"emit {plan}: took longer than {timeout} s"
        except OSError as e:
            return f"emit {plan}: {e}"
        if result.returncode != 0:
            return f"emit {plan}: {_engine_error(result)}"
        try:
            results[plan] = train(emit, 1, timeout=timeout)[1]
        except LaunchError as e:
            return f"run {plan}: {str(e).splitlines()[0]}"[:300]
    reference = results.pop("single")
    for plan, values in results.items():
        rel, where = worst_error(reference, values)
        if not rel <= RTOL:
            return f"{plan} differs from 1 device: {where} relative error {rel:.2e}"
    return ""


def _build_with_inputs(family, name):
    """(model in training mode, example inputs, loss function or None for the model's own) of one class."""
    if FAMILIES[family] is None:
        from .coverage_torch import MODELS
        return MODELS[name]()
    import transformers
    cls = getattr(transformers, name)
    model, config = _build(cls, family)
    takes = inspect.signature(cls.forward).parameters
    own = "labels" in takes or "start_positions" in takes  # question answering: the span's two positions
    return model, example_inputs(config, family, cls), None if own else _classification_loss


def check_model(family, name, loom_binary, workdir, timeout=180, match=False, capture="auto"):
    """One row of the report: {family, model, built, traced, dp, tp, match, reason}; match is None when it
    was not checked (not asked, or the class does not plan both ways)."""
    import loom
    row = {"family": family, "model": name, "built": False, "traced": False, "dp": False, "tp": False,
           "match": None, "reason": ""}
    try:
        with _time_limit(timeout):
            model, inputs, loss = _build_with_inputs(family, name)
            row["built"] = True
            graph = loom.trace(model, inputs, loss=loss, capture=capture)
            row["traced"] = True
    except Exception as e:  # noqa: BLE001: every failure is a row of the report
        row["reason"] = ("" if row["built"] else "does not build: ") + _reason(e)
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
            row["reason"] = f"plan {plan}: {_engine_error(result)}"
    if match and row["dp"] and row["tp"]:
        if _has_batch_norm(model):
            try:  # the same model in float64, traced again: the plans of that graph are trained and compared
                with _time_limit(timeout):
                    model.double()
                    inputs = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
                    graph = loom.trace(model, inputs, loss=loss, capture=capture)
            except Exception as e:  # noqa: BLE001
                row["match"], row["reason"] = False, "float64 trace: " + _reason(e)
                return row
            row["float64"] = True
            path = os.path.join(workdir, f"{name}-f64.json")
            loom.save_graph(graph, path)
        why = check_match(loom_binary, path, workdir, name, timeout)
        row["match"] = not why
        row["reason"] = why
    return row


def _has_batch_norm(model):
    """Whether a training-mode batch norm is in the model: its step is compared in float64 (see MATCH)."""
    import torch.nn as nn
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training for m in model.modules())


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
        wide = sum(1 for r in checked if r.get("float64"))
        text += f"; {wide} with batch norm compared in float64)" if wide else ")"
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
                        help="comma-separated class names: only these (e.g. GPT2LMHeadModel)")
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
        classes = [(f, n) for f, n in classes if n in wanted]
    if args.limit > 0:
        classes = classes[:args.limit]
    rows, start = [], time.monotonic()
    with tempfile.TemporaryDirectory(prefix="loom-coverage-") as workdir:
        for family, name in classes:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                row = check_model(family, name, args.loom, workdir, args.timeout, args.match, args.capture)
            rows.append(row)
            print(f"{family:<21} {name:<50} traced {row['traced']!s:<5} dp {row['dp']!s:<5} tp {row['tp']!s:<5} "
                  f"match {row['match']!s:<5} {row['reason']}", file=sys.stderr, flush=True)
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
