"""Loom's Python layer: what must live inside PyTorch. Tracing a torch.nn.Module into the engine's graph
JSON is here; planning is the engine's (`loom plan --graph FILE`). DESIGN.md: no planning logic in Python.

    graph = loom.trace(model, {"input_ids": ids, "labels": ids})
    loom.save_graph(graph, "model.json")      # then: loom plan --graph model.json --policy dp --gpus 2
"""

from .api import ParallelModule, PlanError, parallelize, plan
from .custom_ops import register_op
from .graph_json import save_graph
from .tracer import UnsupportedOpsError, trace

__all__ = ["trace", "save_graph", "UnsupportedOpsError", "register_op", "parallelize", "plan", "ParallelModule",
           "PlanError"]
