"""loom.coverage on a fixed subset of transformers classes: each builds from its shrunk default config,
traces, and the engine plans it under dp and megatron tp; one also trains a step of both plans and of
one device (--match), and the comparison it uses has teeth."""

import json

import pytest
import torch

pytest.importorskip("transformers")

from loom import coverage, coverage_configs, coverage_match  # noqa: E402

SUBSET = [
    ("causal-lm", "GPT2LMHeadModel"),
    ("causal-lm", "LlamaForCausalLM"),
    ("causal-lm", "OPTForCausalLM"),
    ("causal-lm", "BertLMHeadModel"),
    ("seq2seq-lm", "T5ForConditionalGeneration"),
    ("seq2seq-lm", "LongT5ForConditionalGeneration"),  # exported only with the mask it makes itself in eager
    ("image-classification", "ViTForImageClassification"),
    ("image-classification", "ResNetForImageClassification"),
    ("causal-lm", "MixtralForCausalLM"),  # top-k routing, lowered densely
    ("masked-lm", "BertForMaskedLM"),
    ("sequence-classification", "BertForSequenceClassification"),
    ("token-classification", "BertForTokenClassification"),
    ("question-answering", "BertForQuestionAnswering"),  # its loss from start and end positions
    ("multiple-choice", "BertForMultipleChoice"),  # [batch, choices, tokens]
    ("torch-nn", "TransformerSeq2Seq"),  # plain torch.nn, no transformers
    ("torch-nn", "ConvNet"),
]


@pytest.fixture(scope="module")
def rows(loom_binary, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("coverage")
    return [coverage.check_model(family, name, loom_binary, str(workdir), timeout=120) for family, name in SUBSET]


def test_the_subset_is_among_the_families_classes():
    classes = coverage.model_classes(list(coverage.FAMILIES))
    assert set(SUBSET) <= set(classes)
    assert len(classes) == len(set(classes))


@pytest.mark.parametrize("index", range(len(SUBSET)), ids=[name for _, name in SUBSET])
def test_each_traces_and_plans_dp_and_tp(rows, index):
    row = rows[index]
    assert row["built"] and row["traced"] and row["dp"] and row["tp"], row["reason"]


def test_the_report_prints_a_row_per_class_and_the_shares(rows):
    table = coverage.format_table(rows)
    assert len(table.splitlines()) == len(rows) + 1 and "GPT2LMHeadModel" in table
    totals = coverage.summary(rows + [dict(rows[0], model="Broken", traced=False, dp=False, tp=False, reason="x")])
    assert (totals["built"], totals["all"]) == (len(rows) + 1, len(rows))
    assert f"both ways {len(rows)}/{len(rows) + 1}" in totals["text"]


def test_bad_options_name_the_option(capsys, loom_binary):
    with pytest.raises(SystemExit):
        coverage.main(["--families", "speech", "--loom", loom_binary])
    assert "--family: unknown speech" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        coverage.main(["--classes", "NoSuchModel", "--loom", loom_binary])
    assert "--classes: NoSuchModel" in capsys.readouterr().err


def test_a_subset_runs_by_family_and_class(capsys, loom_binary, tmp_path):
    report = tmp_path / "report.json"
    assert coverage.main(["--family", "torch-nn,multiple-choice", "--classes", "BertForMultipleChoice,MLP",
                          "--loom", loom_binary, "--json", str(report)]) == 0
    rows = json.loads(report.read_text())["rows"]
    # in the order given (the most used first: a part stopped at its deadline has run them), not the families'
    assert [(r["family"], r["model"]) for r in rows] == [("multiple-choice", "BertForMultipleChoice"),
                                                          ("torch-nn", "MLP")]
    assert all(r["traced"] and r["dp"] and r["tp"] for r in rows), rows
    assert coverage.main(["--family", "torch-nn", "--limit", "1", "--loom", loom_binary]) == 0
    assert "1 classes, 1 build" in capsys.readouterr().out


def test_one_class_trains_as_one_device_under_dp_and_tp(loom_binary, tmp_path):
    row = coverage.check_model("causal-lm", "LlamaForCausalLM", loom_binary, str(tmp_path), timeout=120, match=True)
    assert row["match"] is True, row["reason"]
    assert "matches single-process training 1/1" in coverage.summary([row])["text"]


def test_a_tp_step_off_by_float32_rounding_matches_in_float64(tmp_path, loom_binary):
    """MobileBERT's tp step differs from 1 device by 2e-5 to 5e-5 in float32 (NoNorm weights: x * w + b, no
    normalisation, whose gradients sum large terms that cancel; tp adds the row-parallel linears' shards in
    another order). In float64 the same plans agree to ~4e-14: rounding, not a wrong plan. The row says so."""
    row = coverage.check_model("question-answering", "MobileBertForQuestionAnswering", loom_binary, str(tmp_path),
                               timeout=120, match=True)
    assert row["match"] is True, row["reason"]
    if row.get("float64"):  # float32 rounding happened to reach RTOL: the float32 difference is kept
        assert coverage_match.DIFFERS in row["float32"]
    text = coverage.summary([row, dict(row, float64=True, float32="tp differs from 1 device: w 2e-5")])["text"]
    assert "compared in float64 after float32 rounding differed" in text


def test_the_comparison_has_teeth():
    reference = {"loss": torch.tensor(2.5), "w": torch.tensor([1.0, -2.0]), "b": torch.tensor([1e-10, 0.0])}
    assert coverage_match.worst_error(reference, dict(reference))[0] == 0.0
    off = dict(reference, w=torch.tensor([1.0, -2.0001]))  # 5e-5 relative: a wrong gradient, not rounding
    assert coverage_match.worst_error(reference, off) == (pytest.approx(5e-5, rel=1e-2), "w")
    # A gradient that is exactly zero (the key bias's) differs by rounding noise far below the model's scale.
    noise = dict(reference, b=torch.tensor([3e-10, -1e-10]))
    assert coverage_match.worst_error(reference, noise)[0] <= coverage_match.RTOL
    assert coverage_match.worst_error(reference, {"loss": reference["loss"], "w": reference["w"]})[1] == "b"
    assert coverage_match.worst_error(reference, dict(reference, loss=torch.tensor(float("nan"))))[1] == "loss"


def test_batch_norm_classes_are_compared_in_float64_and_the_summary_says_so():
    import torch.nn as nn
    assert coverage_match.has_batch_norm(nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4)).train())
    assert not coverage_match.has_batch_norm(nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4)).eval())
    assert not coverage_match.has_batch_norm(nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4)))
    row = {"family": "image-classification", "model": "M", "built": True, "traced": True, "dp": True, "tp": True,
           "match": True, "reason": ""}
    text = coverage.summary([row, dict(row, model="N", float64=True, float32="")])["text"]
    assert "2 of the 2 checked; 1 with batch norm compared in float64)" in text


def test_the_markdown_tables_count_and_list_what_does_not_match():
    from loom.coverage_markdown import tables

    row = lambda model, **k: {"family": "causal-lm", "model": model, "built": True, "traced": True, "dp": True,  # noqa: E731
                              "tp": True, "match": True, "reason": "", **k}
    report = {"rows": [row("A"), row("B", match=False, reason="dp differs | 1e-3"),
                       row("C", built=False, traced=False, dp=False, tp=False, match=None, reason="does not build")],
              "summary": {"text": "3 classes"}}
    text = tables(report)
    assert "| causal-lm | 3 | 2 | 2 (100 %) | 2 (100 %) | 1 (50 %) |" in text
    assert "| causal-lm | B | match | dp differs \\| 1e-3 |" in text and "| causal-lm | C | build |" in text
    assert "| causal-lm | A |" not in text


def test_parts_of_a_run_merge_and_unchecked_classes_are_not_failures(tmp_path, capsys):
    from loom.coverage_markdown import main, merged, tables

    row = lambda model, **k: {"family": "masked-lm", "model": model, "built": True, "traced": True, "dp": True,  # noqa: E731
                              "tp": True, "match": None, "reason": "", **k}
    first = {"rows": [row("A"), row("B", traced=False, dp=False, tp=False, reason="unsupported: aten.x")]}
    second = {"rows": [row("B", match=True), row("C", match=False, reason="tp differs")]}
    report = merged([first, second])
    assert [r["model"] for r in report["rows"]] == ["A", "B", "C"] and report["rows"][1]["match"] is True
    assert report["summary"]["all"] == 3 and report["summary"]["match"] == 1
    text = tables(report)
    assert "| masked-lm | 3 | 3 | 3 (100 %) | 3 (100 %) | 1 (33 %) of 2 checked |" in text
    assert "| masked-lm | C | match | tp differs |" in text and "| masked-lm | A |" not in text
    paths = []
    for k, part in enumerate((first, second)):
        paths.append(tmp_path / f"part{k}.json")
        paths[-1].write_text(json.dumps(dict(part, summary={})))
    assert main([str(p) for p in paths] + ["--json", str(tmp_path / "all.json")]) == 0
    assert "| masked-lm | B |" not in capsys.readouterr().out
    assert json.loads((tmp_path / "all.json").read_text())["summary"]["match"] == 1


def test_the_top_causes_count_each_unsupported_op_once_per_class():
    from loom.coverage_markdown import top_causes

    row = lambda model, reason, **k: {"family": "causal-lm", "model": model, "built": True, "traced": False,  # noqa: E731
                                      "dp": False, "tp": False, "match": None, "reason": reason, **k}
    rows = [row("A", "unsupported: aten.topk.default, aten.sort.default"), row("B", "unsupported: aten.topk.default"),
            row("C", "GuardOnDataDependentSymNode: Could not guard"), row("D", "does not build: x", built=False),
            row("E", "", traced=True, dp=True, tp=True, match=True)]
    lines = top_causes(rows).splitlines()
    assert lines[2] == "| 2 | aten.topk.default | A, B |"
    assert "| 1 | GuardOnDataDependentSymNode | C |" in lines and "| 1 | aten.sort.default | A |" in lines
    assert len(lines) == 5  # D does not build, E counts


def _config_class(name):
    import transformers
    cls = getattr(transformers, name, None)
    if cls is None:
        pytest.skip(f"transformers {transformers.__version__} has no {name}")
    return cls


def test_a_shrunk_config_is_built_again_so_derived_fields_follow():
    # Mamba-2: heads x head width = expand x hidden (the full model's 128 heads of 64 no longer fit)
    config = coverage_configs.shrunk_config(_config_class("Mamba2Config"), "causal-lm")
    assert config.num_heads * config.head_dim == config.expand * config.hidden_size == 128
    assert config.n_groups and config.num_heads % config.n_groups == 0
    # a pooler's width that was the hidden size follows it (DeBERTa-v2: 1536 = hidden)
    config = coverage_configs.shrunk_config(_config_class("DebertaV2Config"), "sequence-classification")
    assert config.pooler_hidden_size == config.hidden_size == 64
    # no grouped queries by default: still none once the heads shrink
    config = coverage_configs.shrunk_config(_config_class("LlamaConfig"), "causal-lm")
    assert config.num_key_value_heads == config.num_attention_heads == 4


def test_per_layer_lists_keep_every_kind_of_layer_and_match_the_layer_count():
    config = coverage_configs.shrunk_config(_config_class("Gemma3TextConfig"), "causal-lm")
    assert config.num_hidden_layers == 2 and sorted(config.layer_types) == ["full_attention", "sliding_attention"]


def test_layerdrop_is_off_so_export_sees_no_random_branch():
    config = coverage_configs.shrunk_config(_config_class("M2M100Config"), "seq2seq-lm")
    assert config.encoder_layerdrop == config.decoder_layerdrop == 0.0


def test_narrower_embeddings_and_bottlenecks_fit_the_shrunk_hidden_size():
    # MobileBERT's head projects hidden - embedding: 128-wide embeddings under a 64 hidden size went negative
    config = coverage_configs.shrunk_config(_config_class("MobileBertConfig"), "masked-lm")
    assert config.embedding_size == config.intra_bottleneck_size == config.true_hidden_size == config.hidden_size


def test_a_part_cut_short_is_read_back_from_its_progress_lines(tmp_path):
    from loom.coverage_markdown import main

    rows = [{"family": "causal-lm", "model": "A", "built": True, "traced": True, "dp": True, "tp": False,
             "match": None, "reason": "plan tp: loom: error: x: y"},
            {"family": "causal-lm", "model": "B", "built": False, "traced": False, "dp": False, "tp": False,
             "match": None, "reason": "does not build: ValueError: z"},
            {"family": "causal-lm", "model": "C", "built": True, "traced": True, "dp": True, "tp": True,
             "match": True, "reason": ""},
            {"family": "causal-lm", "model": "D", "built": True, "traced": True, "dp": True, "tp": True,
             "match": True, "reason": "", "float64": True,
             "float32": "tp differs from 1 device: w relative error 2.30e-05"},
            {"family": "causal-lm", "model": "F", "built": True, "traced": True, "dp": True, "tp": True,
             "match": True, "reason": "", "float64": True, "own_init": True,
             "float32": "tp differs from 1 device: w relative error 2.48e-02"},
            {"family": "image-classification", "model": "E", "built": True, "traced": True, "dp": True, "tp": True,
             "match": False, "reason": "dp differs from 1 device: w relative error 1.00e-02", "float64": True,
             "float32": ""}]
    lines = ["W1127 a warning line"] + [coverage.progress_line(r) for r in rows]  # as a run prints them
    (tmp_path / "part.err").write_text("\n".join(lines) + "\n")
    assert main([str(tmp_path / "part.err"), "--json", str(tmp_path / "all.json")]) == 0
    assert json.loads((tmp_path / "all.json").read_text())["rows"] == rows


@pytest.mark.parametrize(("family", "name"), [("sequence-classification", "BartForSequenceClassification"),
                                              ("question-answering", "LongformerForQuestionAnswering"),
                                              ("multiple-choice", "LongformerForMultipleChoice")])
def test_the_samples_carry_the_special_tokens_their_heads_look_for(family, name):
    """BART-like classifiers read each row's last end-of-sequence token, Longformer's question answering and
    multiple choice three separators a row (`q </s></s> c </s>`); without them the eager model refuses the
    sample ("Each example must contain at least one <eos> token", "There should be exactly three separator
    tokens"), so no capture could be checked against it."""
    from loom.coverage_inputs import build_with_inputs

    _config_class(name.replace("For", "Config").split("Config")[0] + "Config")
    model, inputs, loss = build_with_inputs(family, name)
    ids, config = inputs["input_ids"], model.config
    if family == "sequence-classification":
        assert (ids[..., -1] == config.eos_token_id).all()
    else:
        assert ((ids == config.sep_token_id).sum(-1) == 3).all()
    with torch.no_grad():
        assert torch.isfinite(model(**inputs).loss)


def test_image_stage_widths_shrink_by_value_so_the_stages_still_chain():
    # HGNetV2 builds its stages from stage_in/out_channels and its head from hidden_sizes[-1]: 2048 everywhere
    config = coverage_configs.shrunk_config(_config_class("HGNetV2Config"), "image-classification")
    assert config.stage_out_channels[:-1] == config.stage_in_channels[1:]
    assert config.stage_out_channels[-1] == config.hidden_sizes[-1] == 64
    # TextNet's stem is as wide as its first stage (64 and 64): equal widths stay equal
    config = coverage_configs.shrunk_config(_config_class("TextNetConfig"), "image-classification")
    assert config.stem_out_channels == config.hidden_sizes[0] == config.hidden_sizes[1] == 16
    # Bit's group norm: 32 groups do not divide a shrunk stage's 8-channel bottleneck
    config = coverage_configs.shrunk_config(_config_class("BitConfig"), "image-classification")
    assert config.num_groups == coverage_configs.GROUPS and all(w % config.num_groups == 0 for w in config.hidden_sizes)
    # EfficientNet's head width is its base width (1280) times the width coefficient, as its top conv's
    config = coverage_configs.shrunk_config(_config_class("EfficientNetConfig"), "image-classification")
    assert (config.width_coefficient, config.depth_coefficient, config.hidden_dim) == (0.25, 1.0, 320)
    # Hiera's image size is [height, width]: its position table follows the 32x32 images
    config = coverage_configs.shrunk_config(_config_class("HieraConfig"), "image-classification")
    assert list(config.image_size) == [coverage_configs.IMAGE] * 2


@pytest.mark.parametrize("name", ["HGNetV2", "TextNet", "Hiera", "Bit", "EfficientNet", "PPLCNet"])
def test_image_classifiers_run_their_shrunk_config_on_small_images(name):
    """Each ran only at its own image size or not at all before (a head 2048 wide under 64 channels, a stem
    of 64 channels into a 16-channel stage, a 224x224 position table, groups that do not divide); PP-LCNet's
    head scores come as last_hidden_state, the loss reads them."""
    from loom.coverage_inputs import build_with_inputs

    _config_class(name + "Config")
    model, inputs, loss = build_with_inputs("image-classification", name + "ForImageClassification")
    assert inputs["pixel_values"].shape[-2:] == (coverage_configs.IMAGE,) * 2
    assert sum(p.numel() for p in model.parameters()) < 5_000_000
    with torch.no_grad():
        outputs = model(**inputs)
        value = outputs.loss if loss is None else loss(outputs, inputs)
    assert torch.isfinite(value) and value > 0


def test_every_sub_config_shrinks_and_widths_and_token_ids_across_them_follow():
    """Nemotron 3.5 Transcribe: its audio towers (audio_config's ASR and diarization encoders) shrink too; its
    language model, whose depth is its per-layer list (no layer count), keeps one layer of each kind; the
    diarization head's audio_hidden_size follows its audio_config; the timestamp head's blank token (the last
    of its vocabulary) stays the last. Its shrunk model had 1.5 G parameters (killed at 23.7 GB)."""
    config = coverage_configs.shrunk_config(_config_class("Nemotron3_5TranscribeConfig"), "seq2seq-lm")
    assert config.audio_config.asr_config.hidden_size == config.audio_config.asr_config.num_hidden_layers * 32
    diarization = config.audio_config.diarization_config
    assert diarization.head_config.audio_hidden_size == diarization.audio_config.hidden_size == 64
    assert config.text_config.layers_block_type == ["linear_attention", "moe", "full_attention"]
    assert config.word_timestamp_config.blank_token_id == config.word_timestamp_config.vocab_size - 1


def test_a_class_that_reads_a_none_mask_under_export_is_given_ones():
    from loom.coverage_inputs import build_with_inputs, with_ones_mask

    model, inputs, _ = build_with_inputs("seq2seq-lm", "LongT5ForConditionalGeneration")
    masked = with_ones_mask(model, inputs)
    assert masked["attention_mask"].tolist() == torch.ones_like(inputs["input_ids"]).tolist()
    assert with_ones_mask(model, masked) is None  # a mask given stays
    vit, images, _ = build_with_inputs("image-classification", "ViTForImageClassification")
    assert with_ones_mask(vit, images) is None  # no token ids, no mask


def test_a_later_row_stopped_by_the_time_limit_does_not_replace_one_that_got_further():
    from loom.coverage_markdown import merged

    done = {"family": "causal-lm", "model": "A", "built": True, "traced": True, "dp": True, "tp": True,
            "match": True, "reason": ""}
    slow = dict(done, traced=False, dp=False, tp=False, match=None, reason="_Timeout: took longer than 120 s")
    broken = dict(slow, reason="TypeError: x")
    assert merged([{"rows": [done]}, {"rows": [slow]}])["rows"] == [done]
    assert merged([{"rows": [done]}, {"rows": [broken]}])["rows"] == [broken]  # the class's own failure counts
    assert merged([{"rows": [slow]}, {"rows": [done]}])["rows"] == [done]


class _LogScale(torch.nn.Module):
    """A loss defined only for positive `p`: its own 2.0 train, the runtime's seeded uniform(-0.5, 0.5) give NaN."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.p = torch.nn.Parameter(torch.full((8,), 2.0))

    def forward(self, x, y):
        return torch.nn.functional.mse_loss(self.proj(x) * torch.log(self.p), y)


def test_a_step_from_the_models_own_parameters_is_the_last_word(loom_binary, tmp_path):
    import loom

    torch.manual_seed(0)
    module, batch = _LogScale(), {"x": torch.randn(4, 8), "y": torch.randn(4, 8)}
    path = tmp_path / "log.json"
    loom.save_graph(loom.trace(module, batch, capture="export"), path)
    seeded = coverage_match.check_match(loom_binary, str(path), str(tmp_path), "log", timeout=120)
    assert coverage_match.DIFFERS in seeded and "inf" in seeded  # NaN steps from log of negative seeds
    own = coverage_match.check_match(loom_binary, str(path), str(tmp_path), "log-own", timeout=120, own=(module, batch))
    assert own == ""

