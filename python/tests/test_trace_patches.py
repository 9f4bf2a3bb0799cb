"""A HuggingFace trace that fails part-way leaves no torch function patched: HuggingFace's tracer swaps
torch.clamp, torch.arange, ... for wrappers while it runs, and a later trace in the same process (the
coverage run traces every model class in one) must still find the originals in the lowering's table."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import loom

transformers = pytest.importorskip("transformers")
HFTracer = pytest.importorskip("transformers.utils.fx", reason="transformers 5 has no torch.fx tracer").HFTracer

PATCHED = HFTracer._TORCH_METHODS_TO_PATCH


@pytest.fixture()
def torch_functions():
    """The torch functions HuggingFace patches, as they were; put back after the test whatever it did,
    so a regression here does not spill into the other tests."""
    originals = {name: getattr(torch, name) for name in PATCHED}
    yield originals
    for name, fn in originals.items():
        setattr(torch, name, fn)


class _Config(transformers.PretrainedConfig):
    model_type = "loom-data-dependent"


class DataDependent(transformers.PreTrainedModel):
    """Branches on a tensor's value, which a trace cannot fix: the trace fails after the patches are in."""
    config_class = _Config

    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(16, 8)
        self.head = nn.Linear(8, 16)

    def forward(self, input_ids):
        h = torch.clamp(self.embed(input_ids), min=-1.0)
        if h.sum() > 0:
            h = h * 2
        return self.head(h)


class Clamped(transformers.PreTrainedModel):
    """Needs torch.clamp, which HuggingFace's tracer records through its patch of it."""
    config_class = _Config

    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(16, 8)
        self.fc = nn.Linear(8, 4)

    def forward(self, input_ids):
        return torch.clamp(self.fc(self.embed(input_ids)), min=0.0, max=1.0)


def _fail_a_huggingface_trace():
    model = DataDependent(_Config())
    with pytest.raises(Exception, match="decides control flow"):
        loom.trace(model, {"input_ids": torch.randint(0, 16, (2, 5))},
                   loss=lambda out, batch: out.sum())


def test_failed_huggingface_trace_restores_the_torch_functions(torch_functions):
    _fail_a_huggingface_trace()
    leaked = [name for name, fn in torch_functions.items() if getattr(torch, name) is not fn]
    assert leaked == []


def test_trace_after_a_failed_one_lowers_the_patched_function(torch_functions):
    _fail_a_huggingface_trace()
    graph = loom.trace(Clamped(_Config()), {"input_ids": torch.randint(0, 16, (2, 5)), "y": torch.randn(2, 5, 4)},
                       loss=lambda out, batch: F.mse_loss(out, batch["y"]))
    clamps = [op for op in graph["ops"] if op["type"] == "clamp"]
    assert len(clamps) == 1 and clamps[0]["attrs"] == {"min": {"real": 0.0}, "max": {"real": 1.0}}


def test_repeated_failures_do_not_stack_wrappers(torch_functions):
    for _ in range(3):
        _fail_a_huggingface_trace()
    assert torch.clamp is torch_functions["clamp"] and torch.arange is torch_functions["arange"]


class NumpySizes(transformers.PreTrainedModel):
    """Perceiver's heads: sizes computed with numpy (np.int64) among a view's arguments."""
    config_class = _Config

    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(16, 8)
        self.heads, self.width = np.int64(2), np.prod([2, 2])

    def forward(self, input_ids):
        h = self.embed(input_ids)
        return h.view(h.size()[:-1] + (self.heads, self.width)).transpose(1, 2)


def test_numpy_numbers_in_a_huggingface_trace_are_their_values():
    graph = loom.trace(NumpySizes(_Config()), {"input_ids": torch.randint(0, 16, (2, 5))},
                       loss=lambda out, batch: out.pow(2).mean())
    views = [op for op in graph["ops"] if op["type"] in ("view", "reshape")]
    assert [graph["tensors"][op["outputs"][0]]["shape"] for op in views] == [[2, 5, 2, 4]]
