"""loom.coverage on a fixed subset of transformers classes: each builds from its shrunk default config,
traces, and the engine plans it under dp and megatron tp."""

import pytest

pytest.importorskip("transformers")

from loom import coverage  # noqa: E402

SUBSET = [
    ("causal-lm", "GPT2LMHeadModel"),
    ("causal-lm", "LlamaForCausalLM"),
    ("causal-lm", "OPTForCausalLM"),
    ("causal-lm", "BertLMHeadModel"),
    ("seq2seq-lm", "T5ForConditionalGeneration"),
    ("image-classification", "ViTForImageClassification"),
    ("image-classification", "ResNetForImageClassification"),
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
    assert "--families: unknown speech" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        coverage.main(["--models", "NoSuchModel", "--loom", loom_binary])
    assert "--models: NoSuchModel" in capsys.readouterr().err
