"""The shrunk configs of loom.coverage: a transformers class's default config made small (2 layers, hidden 64,
4 heads, vocabulary 512, 32x32 images), then built again by its constructor so the fields it derives follow
(`shrunk_config`)."""

import contextlib
import warnings

IMAGE, VOCAB, LABELS = 32, 512, 10

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
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
              "cls_token_id", "unk_token_id", "mask_token_id")


def shrink(config, family, image_sizes=True):
    """The config made small in place, every sub config too: few layers, small widths, a small vocabulary,
    small images (with image_sizes; else the image and patch sizes stay the config's)."""
    for value, fields in _SMALL.items():
        for field in fields:
            if isinstance(getattr(config, field, None), int) and not isinstance(getattr(config, field), bool):
                with contextlib.suppress(NotImplementedError, AttributeError):  # some configs refuse an alias
                    setattr(config, field, value)
    if isinstance(getattr(config, "vocab_size", None), int):
        full, config.vocab_size = config.vocab_size, VOCAB
        for field, value in list(vars(config).items()):
            # other token ids of this vocabulary (a CTC head's blank, the last class) keep their distance
            # from its end
            if (field.endswith("_token_id") and field not in TOKEN_IDS and isinstance(value, int)
                    and not isinstance(value, bool) and VOCAB <= value < full):
                setattr(config, field, VOCAB - (full - value) if full - value <= VOCAB else len(TOKEN_IDS))
        if isinstance(getattr(config, "decoder_vocab_size", None), int):  # Marian's target vocabulary
            config.decoder_vocab_size = VOCAB
        for field in TOKEN_IDS:  # special tokens of the full vocabulary would index past the small one
            if isinstance(getattr(config, field, None), int) and getattr(config, field) >= VOCAB:
                setattr(config, field, TOKEN_IDS.index(field))
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
        size = getattr(config, "image_size", None)
        if image_sizes and isinstance(size, int):
            config.image_size = IMAGE
        elif image_sizes and _is_ints(size) and len(size) == 2:  # [height, width] (Hiera's position table)
            config.image_size = [IMAGE, IMAGE]
        if isinstance(getattr(config, "patch_size", None), int) and image_sizes:
            config.patch_size = min(config.patch_size, 8)
        _shrink_stage_widths(config)
        _shrink_compound_scaling(config)
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
    for inner in list(vars(config).values()):  # every sub config: text, vision, encoder, audio (Nemotron 3.5's)
        if hasattr(inner, "to_dict") and hasattr(inner, "to_json_string"):
            shrink(inner, family, image_sizes)
    return config


def _is_ints(values):
    """A non-empty list or tuple (transformers 5 gives tuples) of integers."""
    return isinstance(values, (list, tuple)) and bool(values) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in values)


_STAGE_WIDTHS = ("hidden_sizes", "embed_dims", "neck_hidden_sizes")
# Per-stage channel counts some image models build their stages from beside hidden_sizes (HGNetV2's in and
# out channels, TextNet's stem): a field ending so; the input's channels are not a width.
_CHANNEL_SUFFIX, _NOT_CHANNELS = "channels", ("num_channels", "stem_num_channels", "num_channels_out")
# A group norm's groups must divide every width; the narrowest shrunk width (16) at a quarter bottleneck
# (Bit's, rounded up to 8 there) is 4 channels.
GROUPS = 4


def _shrink_stage_widths(config):
    """An image model's per-stage widths, in place: hidden_sizes (embed_dims, neck_hidden_sizes) shrink by
    value, the k-th smallest distinct width to 16 x 2^min(k, 2) (16, 32, 64, 64, ...), so widths that were
    equal stay equal (TextNet's stem and first stage); every other channel count that held one of those
    widths (an int or list field ending in "channels") takes the same small value, so the stages still chain
    (HGNetV2 builds its stages from stage_in/out_channels and its head from hidden_sizes[-1]); a group norm's
    groups (Bit's 32) become GROUPS."""
    small = {}
    for field in _STAGE_WIDTHS:
        sizes = getattr(config, field, None)
        if _is_ints(sizes):
            widths = {w: 16 * 2 ** min(k, 2) for k, w in enumerate(sorted(set(sizes)))}
            setattr(config, field, [widths[s] for s in sizes])
            small = {**widths, **small}  # the first field's widths where two disagree
    if not small:
        return
    for field, value in list(vars(config).items()):
        if not field.endswith(_CHANNEL_SUFFIX) or field in _NOT_CHANNELS:
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value in small:
            setattr(config, field, small[value])
        elif _is_ints(value) and any(v in small for v in value):
            setattr(config, field, [small.get(v, v) for v in value])
    if isinstance(getattr(config, "num_groups", None), int) and config.num_groups > GROUPS:
        config.num_groups = GROUPS


def _shrink_compound_scaling(config):
    """EfficientNet's compound scaling, in place: every stage's width is its base width times
    width_coefficient (the head's width hidden_dim too, which the config holds as a number) and every stage's
    depth its base depth times depth_coefficient; the default (B7: 2.0, 3.1) shrinks to a quarter of B0's
    widths at B0's depth."""
    width, depth = getattr(config, "width_coefficient", None), getattr(config, "depth_coefficient", None)
    if not (isinstance(width, float) and isinstance(depth, float)) or width <= 0.25:
        return
    if isinstance(getattr(config, "hidden_dim", None), int):
        config.hidden_dim = round(config.hidden_dim * 0.25 / width)
    config.width_coefficient, config.depth_coefficient = 0.25, min(depth, 1.0)


_WIDTH_WORDS = ("hidden", "dim", "embed", "width", "bottleneck")
_NOT_WIDTH_WORDS = ("position", "vocab", "image", "patch", "chunk", "window", "layers")
_NARROWER_WIDTHS = ("embedding_size", "bottleneck_size", "true_hidden_size")  # at most the hidden size


def _tie_widths(before, after, outer=({}, {})):
    """In `after` (a config's dict shrunk, sub configs as dicts), in place: every width field that shrinking
    left alone and that held the default's hidden size (a pooler's, a cross attention's, an embedding's), or
    a narrower width that is now wider than the shrunk hidden size (MobileBERT's 128-wide embeddings and
    bottlenecks under a 512 hidden size: its head projects hidden - embedding), takes the shrunk hidden
    size; a width named after a sub config of this config or of the one holding it (X_hidden_size, X_config:
    Nemotron 3.5's diarization head reads its audio_config's width as audio_hidden_size) follows that sub
    config's hidden size; sub configs likewise."""
    width, small = before.get("hidden_size"), after.get("hidden_size")
    for key, value in before.items():
        named = key[:-len("_hidden_size")] + "_config" if str(key).endswith("_hidden_size") else None
        sub = next(((b[named], a[named]) for b, a in ((before, after), outer)
                    if isinstance(b.get(named), dict) and isinstance(a.get(named), dict)), None)
        if isinstance(value, dict) and isinstance(after.get(key), dict):
            _tie_widths(value, after[key], (before, after))
        elif (sub is not None and isinstance(value, int) and after.get(key) == value
              and sub[0].get("hidden_size") == value and isinstance(sub[1].get("hidden_size"), int)):
            after[key] = sub[1]["hidden_size"]
        elif (isinstance(width, int) and isinstance(small, int) and key != "hidden_size" and isinstance(value, int)
              and not isinstance(value, bool) and after.get(key) == value
              and (value == width or (small < value < width and key.endswith(_NARROWER_WIDTHS)))
              and any(w in key.lower() for w in _WIDTH_WORDS) and not any(w in key.lower() for w in _NOT_WIDTH_WORDS)):
            after[key] = small


def _tie_layers_and_heads(before, after):
    """In `after`, in place, per config and sub config: a per-layer list (layer_types, layers_block_type) the
    default sized to its layer count keeps as many entries as the shrunk layer count, every kind of layer
    kept where it fits (the first of each kind, then the first others, in order); a config with no layer
    count, whose per-layer list is its depth (Nemotron-H's layers_block_type), keeps one layer of each kind
    (at least LAYERS); key-value heads that equalled the attention heads (no grouped queries) still do."""
    layers, small = before.get("num_hidden_layers"), after.get("num_hidden_layers")
    for key, value in before.items():
        if isinstance(value, dict) and isinstance(after.get(key), dict):
            _tie_layers_and_heads(value, after[key])
        elif (isinstance(layers, int) and isinstance(small, int) and small < layers and isinstance(value, list)
              and len(value) == layers and after.get(key) == value):
            after[key] = _some_layers(value, small)
        elif (layers is None and key in _DEPTH_LISTS and isinstance(value, list) and after.get(key) == value
              and all(isinstance(v, str) for v in value)):
            after[key] = _some_layers(value, max(LAYERS, len(set(value))))
    heads = ("num_key_value_heads", "num_attention_heads")
    if all(isinstance(before.get(k), int) and isinstance(after.get(k), int) for k in heads) and \
            before[heads[0]] == before[heads[1]]:
        after[heads[0]] = after[heads[1]]


LAYERS = 2  # _SMALL's layer count
_DEPTH_LISTS = ("layers_block_type", "layer_types")


def _some_layers(kinds, count):
    """`count` entries of the per-layer list `kinds`, in order: the first of each kind, then the first others."""
    firsts = sorted({repr(v): i for i, v in reversed(list(enumerate(kinds)))}.values())[:count]
    keep = sorted(firsts + [i for i in range(len(kinds)) if i not in firsts][:count - len(firsts)])
    return [kinds[i] for i in keep]


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
