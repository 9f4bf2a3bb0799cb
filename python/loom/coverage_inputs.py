"""The classes of loom.coverage built and given a batch: a model from its shrunk config in training mode
(`build_model`), the example batch its family trains on (`example_inputs`: tokens and labels, a span's positions,
choices, images), and the loss of a class that takes no labels."""

import inspect

from .coverage_configs import TOKEN_IDS, IMAGE, LABELS, VOCAB, shrunk_config

BATCH, SEQ, TARGET_SEQ, CHOICES = 2, 16, 8, 2
# Images come 8 a batch: training-mode batch norm divides by the batch's variance, and at 2 images a
# float32 step (torch's own, 1 device) is already ~1e-3 off the exact one, so 1 device and dp 2 could not
# be compared at RTOL; at 8 they agree to ~2e-6 where the gradients are right.
IMAGE_BATCH = 8


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
    ids = torch.randint(len(TOKEN_IDS), vocab, (BATCH, SEQ), generator=generator)
    if family == "sequence-classification":
        return {"input_ids": _marked(ids, config, family, vocab), "labels": torch.randint(0, LABELS, (BATCH,),
                                                                                  generator=generator)}
    if family == "token-classification":
        return {"input_ids": ids, "labels": torch.randint(0, LABELS, (BATCH, SEQ), generator=generator)}
    if family == "question-answering":  # the answer span's first and last token
        start = torch.randint(0, SEQ // 2, (BATCH,), generator=generator)
        return {"input_ids": _marked(ids, config, family, vocab), "start_positions": start,
                "end_positions": start + SEQ // 4}
    if family == "multiple-choice":  # [batch, choices, tokens], the label the right choice
        choices = torch.randint(len(TOKEN_IDS), vocab, (BATCH, CHOICES, SEQ), generator=generator)
        return {"input_ids": _marked(choices, config, family, vocab),
                "labels": torch.randint(0, CHOICES, (BATCH,), generator=generator)}
    if family == "seq2seq-lm" and (cls is None or "decoder_input_ids" in takes):
        # The decoder's inputs are the labels shifted right, given as data (as seq2seq data loaders do).
        labels = torch.randint(len(TOKEN_IDS), vocab, (BATCH, TARGET_SEQ), generator=generator)
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


def _marked(ids, config, family, vocab):
    """`ids` (random ids past the special tokens) with the special tokens its family's heads look for:
    sequence classification ends every row with the end-of-sequence token (BART, T5 and the like classify at
    the last one, and refuse a row without); question answering and multiple choice read a question and a
    context, `q </s></s> c </s>` (Longformer puts global attention on the question up to the first separator,
    and refuses a row without three)."""
    def token(field):
        value = getattr(config, field, None)
        return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < vocab else None
    ids = ids.clone()
    if family == "sequence-classification" and token("eos_token_id") is not None:
        ids[..., -1] = token("eos_token_id")
    if family in ("question-answering", "multiple-choice") and token("sep_token_id") is not None:
        for position in (SEQ // 4, SEQ // 4 + 1, SEQ - 1):
            ids[..., position] = token("sep_token_id")
    return ids


def build_model(cls, family):
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
            if isinstance(global_image, (list, tuple)) and len(global_image) == 2 and global_image[0] == global_image[1]:
                global_image = global_image[0]  # [height, width] of a square image
            config.loom_image_size = global_image if isinstance(global_image, int) else IMAGE
    model.train()
    if hasattr(model, "set_default_language"):  # X-MOD's adapters need a language (its docs: en_XX)
        model.set_default_language("en_XX")
    return model, config


def _classification_loss(outputs, batch):
    """For a class that takes no labels (DeiT and LeViT with a distillation head, whose loss is the
    teacher's): cross entropy of its logits, the loss its fine-tuning head is trained with. PP-LCNet's
    classifier returns its head's scores as last_hidden_state (no logits field): the first output."""
    import torch.nn.functional as F
    logits = outputs["logits"] if "logits" in outputs else next(iter(outputs.values()))
    return F.cross_entropy(logits, batch["labels"])


def build_with_inputs(family, name):
    """(model in training mode, example inputs, loss function or None for the model's own) of one class."""
    if family == "torch-nn":
        from .coverage_torch import MODELS
        return MODELS[name]()
    import transformers
    cls = getattr(transformers, name)
    model, config = build_model(cls, family)
    takes = inspect.signature(cls.forward).parameters
    own = "labels" in takes or "start_positions" in takes  # question answering: the span's two positions
    return model, example_inputs(config, family, cls), None if own else _classification_loss


def with_ones_mask(model, inputs):
    """`inputs` with an all-ones attention_mask where the model's forward takes one and none is given, else None.
    transformers makes that default mask itself only outside torch.compile and export (`attention_mask is None
    and not is_torchdynamo_compiling()`): LongT5's and Switch Transformers' encoders then read a None mask."""
    import torch
    ids = inputs.get("input_ids")
    if "attention_mask" in inputs or ids is None or "attention_mask" not in inspect.signature(model.forward).parameters:
        return None
    return {**inputs, "attention_mask": torch.ones_like(ids)}

