"""The engine's graph JSON ("format": "loom-graph", version 1; src/ir/graph_json.cc), built in Python.

Ops carry no "annotation": the engine resolves it from its operator registry when it reads the file
(frontend/graph_file.cc), so the dimension rules live in one place, the C++ registry.
"""

import json
import os
import tempfile

import torch

FORMAT = "loom-graph"
VERSION = 1

_DTYPES = {
    torch.float64: "f64",
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "bool",
}


def dtype_name(dtype):
    """The engine's name of a torch dtype; None when the engine has none (complex, float8, ...)."""
    return _DTYPES.get(dtype)


def _attr_json(value):
    # Reals are tagged so that 1.0 stays a real (the engine keeps integers and reals apart).
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value != value:
            return {"real": "nan"}
        if value in (float("inf"), float("-inf")):
            return {"real": "inf" if value > 0 else "-inf"}
        return {"real": value}
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [int(v) for v in value]
    raise TypeError(f"attribute value {value!r} has no JSON form in the engine's graph format")


class GraphBuilder:
    """Tensors and ops in program order; ids are positions, as the engine requires."""

    def __init__(self, name):
        self.name = name
        self.tensors = []  # dicts without "id"
        self.ops = []  # dicts without "id"
        self.updated = {}  # tensor -> the buffer it is the next step's value of

    def tensor(self, name, role, dtype, shape):
        self.tensors.append({"name": name, "role": role, "dtype": dtype, "shape": [int(s) for s in shape]})
        return len(self.tensors) - 1

    def set_value(self, index, value):
        """A buffer's constant elements (row-major; non-finite ones as strings, as the engine reads them)."""
        flat = value.detach().reshape(-1).to(torch.float64).tolist()
        self.tensors[index]["value"] = [v if v == v and v not in (float("inf"), float("-inf")) else
                                        ("nan" if v != v else ("inf" if v > 0 else "-inf")) for v in flat]

    def update(self, new, old):
        """Tensor `new` is buffer `old` after the step (batch norm's running statistics): a buffer that updates
        `old`, kept with the ops computing it although the loss does not need them."""
        self.tensors[new]["role"] = "buffer"
        self.updated[new] = old

    def op(self, name, type_, inputs, outputs, attrs=None):
        self.ops.append({"name": name, "type": type_, "inputs": list(inputs), "outputs": list(outputs),
                         "attrs": dict(attrs or {})})

    def finish(self, loss):
        """The graph dict with only the ops the loss and the updated buffers need (and the tensors they touch),
        renumbered."""
        producer = {}
        for k, op in enumerate(self.ops):
            for t in op["outputs"]:
                producer[t] = k
        needed_ops, stack, seen = set(), [loss, *self.updated], set()
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            k = producer.get(t)
            if k is not None and k not in needed_ops:
                needed_ops.add(k)
                stack.extend(self.ops[k]["inputs"])
        kept_ops = [op for k, op in enumerate(self.ops) if k in needed_ops]
        used = {loss, *self.updated, *self.updated.values()}
        for op in kept_ops:
            used.update(op["inputs"])
            used.update(op["outputs"])
        renumber = {old: new for new, old in enumerate(sorted(used))}
        tensors = []
        for old in sorted(used):
            t = dict(self.tensors[old])
            if old in self.updated:
                t["updates"] = renumber[self.updated[old]]
            tensors.append({"id": renumber[old], **t})
        ops = []
        for k, op in enumerate(kept_ops):
            ops.append({"id": k, "name": op["name"], "type": op["type"], "pass": "forward",
                        "inputs": [renumber[t] for t in op["inputs"]],
                        "outputs": [renumber[t] for t in op["outputs"]],
                        "attrs": {key: _attr_json(v) for key, v in sorted(op["attrs"].items())}})
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "inputs": [t["id"] for t in tensors if t["role"] == "input"],
            "parameters": [t["id"] for t in tensors if t["role"] == "parameter"],
            "loss": renumber[loss],
            "tensors": tensors,
            "ops": ops,
        }


def save_graph(graph, path):
    """Writes the graph dict to `path` as JSON, atomically (a temporary file renamed into place)."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=".loom-graph-", dir=directory)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(graph, out, separators=(",", ":"))
            out.write("\n")
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
