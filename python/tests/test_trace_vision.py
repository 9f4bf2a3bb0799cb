"""Vision ops: Conv2d, BatchNorm2d, pooling, ReLU and flatten traced to the registry's conv_pool and norm ops."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import loom


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, kernel_size=3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(8, 8, kernel_size=3, padding="same", groups=2)
        self.avg = nn.AvgPool2d(2)
        self.head_pool = nn.AdaptiveAvgPool2d((1, 1))
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        h = self.pool(torch.relu(self.bn1(self.conv1(x))))
        h = self.avg(F.relu(self.conv2(h)))
        return self.fc(self.flatten(self.head_pool(h)))


def cnn_graph(module):
    batch = {"x": torch.randn(2, 3, 32, 32), "y": torch.randint(0, 10, (2,))}
    return loom.trace(module, batch, loss=lambda out, b: F.cross_entropy(out, b["y"]))


def test_cnn_modules_map_to_conv_pool_and_norm_ops():
    module = SmallCNN().train()
    graph = cnn_graph(module)
    # Training batch norm: the batch-splittable parts (sums, centered sums, normalization from the sums), then
    # the running statistics' momentum updates (apart here: their own test is test_batch_norm_dp.py).
    running = [op for op in graph["ops"] if ".running_" in op["name"] or ".num_batches" in op["name"]
               or op["name"].endswith(("batch_mean", "count_less_one", "batch_var"))]
    assert [op["type"] for op in running] == ["div", "add", "div"] + ["scale", "scale", "add"] * 2 + ["add"]
    ops = [op for op in graph["ops"] if op not in running]
    assert [op["type"] for op in ops] == ["conv2d", "batch_norm_sums", "batch_norm_centered_sums", "batch_norm_from_sums",
                                          "relu", "max_pool2d", "conv2d", "relu", "avg_pool2d",
                                          "adaptive_avg_pool2d", "flatten", "linear", "cross_entropy"]
    assert ops[0]["attrs"] == {"stride": [2, 2], "padding": [1, 1], "dilation": [1, 1]}
    assert len(ops[0]["inputs"]) == 2  # no bias
    assert ops[5]["attrs"] == {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1]}
    assert ops[6]["attrs"]["padding"] == [1, 1] and ops[6]["attrs"]["groups"] == 2  # "same" resolved
    assert ops[8]["attrs"] == {"kernel": [2, 2], "stride": [2, 2], "padding": [0, 0]}
    assert ops[9]["attrs"] == {"output_size": [1, 1]}
    tensors = graph["tensors"]
    assert tensors[ops[3]["outputs"][0]]["shape"] == [2, 8, 16, 16]
    assert [tensors[t]["shape"] for t in ops[1]["outputs"]] == [[8], [8]]
    assert sum(math.prod(t["shape"]) for t in tensors if t["role"] == "parameter") == \
        sum(p.numel() for p in module.parameters())


def test_functional_vision_forms():
    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(4, 3, 3, 3))

        def forward(self, x):
            h = F.conv2d(x, self.weight, stride=1, padding=1)
            h = F.max_pool2d(h, 2)
            return F.adaptive_avg_pool2d(h, 2).flatten(1).sum()

    graph = loom.trace(Functional(), torch.randn(2, 3, 8, 8))
    assert [op["type"] for op in graph["ops"]] == ["conv2d", "max_pool2d", "adaptive_avg_pool2d", "flatten", "sum"]
    assert graph["ops"][1]["attrs"] == {"kernel": [2, 2], "padding": [0, 0]}  # stride: the kernel's
    assert graph["ops"][2]["attrs"] == {"output_size": [2, 2]}


def test_batch_norm_in_eval_mode_and_ceil_mode_pooling_are_reported():
    class Unsupported(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm2d(3)
            self.pool = nn.MaxPool2d(2, ceil_mode=True)

        def forward(self, x):
            return self.pool(self.bn(x)).mean()

    with pytest.raises(loom.UnsupportedOpsError) as caught:
        loom.trace(Unsupported().eval(), torch.randn(2, 3, 9, 9))
    unsupported = caught.value.unsupported
    assert set(unsupported) == {"torch.nn.modules.batchnorm.BatchNorm2d", "torch.nn.modules.pooling.MaxPool2d"}
    assert unsupported["torch.nn.modules.batchnorm.BatchNorm2d"]["where"] == ["bn"]


def test_the_engine_plans_the_traced_cnn(tmp_path, run_loom):
    path = tmp_path / "cnn.json"
    loom.save_graph(cnn_graph(SmallCNN().train()), path)
    result = run_loom("graph", "--from", str(path))
    assert result.returncode == 0, result.stderr
    result = run_loom("plan", "--graph", str(path), "--policy", "dp", "--gpus", "2", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
