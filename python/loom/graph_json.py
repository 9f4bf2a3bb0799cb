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
SIZES_VERSION = 1  # the "sizes" section (src/frontend/graph_sizes.h, docs/json.md)

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

    def derive(self, index, source, derived):
        """Input `index` is computed from input `source` by the rule `derived` ({"kind", "ignore_index", "trim"?};
        src/ir/derived_input.h), not given with the batch."""
        self.tensors[index]["derived"] = {"from": source, **derived}

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
        used.update(self.tensors[t]["derived"]["from"] for t in list(used) if "derived" in self.tensors[t])
        renumber = {old: new for new, old in enumerate(sorted(used))}
        tensors = []
        for old in sorted(used):
            t = dict(self.tensors[old])
            if old in self.updated:
                t["updates"] = renumber[self.updated[old]]
            if "derived" in t:
                t["derived"] = {**t["derived"], "from": renumber[t["derived"]["from"]]}
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


def _batch_term(size, other, batch, other_batch):
    """A size of the graph at `batch` that is `other` at `other_batch`: itself when equal, else "K*batch" when it
    is K times the batch at both; else a ValueError."""
    if size == other:
        return size
    if size % batch == 0 and other == size // batch * other_batch:
        k = size // batch
        return "batch" if k == 1 else f"{k}*batch"
    raise ValueError(f"is {size} at batch {batch} and {other} at batch {other_batch}, not a multiple of the batch")


def batch_sizes(graph, other, batch, other_batch):
    """The "sizes" section of `graph` (traced at `batch`) from `other`, the same module traced at `other_batch`:
    every tensor size and integer attribute that moved with the batch, as "K*batch". A ValueError names the
    first thing that differs otherwise (another op, a size that is not a multiple of the batch, a constant
    whose elements depend on the batch)."""
    if len(graph["tensors"]) != len(other["tensors"]) or len(graph["ops"]) != len(other["ops"]):
        raise ValueError(f"the graph at batch {other_batch} has other tensors or ops than at batch {batch}")
    tensors, attrs = [], []
    for t, u in zip(graph["tensors"], other["tensors"]):
        if t["role"] != u["role"] or len(t["shape"]) != len(u["shape"]):  # names may count traces (loss_0, loss_1)
            raise ValueError(f"tensor {t['id']} is '{t['name']}' {t['shape']} at batch {batch} and '{u['name']}' "
                             f"{u['shape']} at batch {other_batch}")
        if t.get("derived") != u.get("derived"):
            raise ValueError(f"derived input '{t['name']}' is {t.get('derived')} at batch {batch} and "
                             f"{u.get('derived')} at batch {other_batch}")
        if t["shape"] == u["shape"]:
            continue
        if "value" in t:
            raise ValueError(f"tensor '{t['name']}' holds constant elements whose shape depends on the batch")
        try:
            shape = [_batch_term(a, b, batch, other_batch) for a, b in zip(t["shape"], u["shape"])]
        except ValueError as e:
            raise ValueError(f"tensor '{t['name']}' {t['shape']} {e}") from None
        tensors.append({"id": t["id"], "shape": shape})
    for op, other_op in zip(graph["ops"], other["ops"]):
        if op["type"] != other_op["type"] or op["attrs"].keys() != other_op["attrs"].keys():
            raise ValueError(f"op {op['id']} is '{op['name']}' ({op['type']}) at batch {batch} and '{other_op['name']}' "
                             f"({other_op['type']}) at batch {other_batch}")
        for name, value in sorted(op["attrs"].items()):
            moved = other_op["attrs"][name]
            if value == moved:
                continue
            try:
                if isinstance(value, int) and isinstance(moved, int) and not isinstance(value, bool):
                    term = _batch_term(value, moved, batch, other_batch)
                elif isinstance(value, list) and isinstance(moved, list) and len(value) == len(moved):
                    term = [_batch_term(a, b, batch, other_batch) for a, b in zip(value, moved)]
                else:
                    raise ValueError(f"is {value!r} at batch {batch} and {moved!r} at batch {other_batch}")
            except ValueError as e:
                raise ValueError(f"op '{op['name']}' attribute '{name}' {e}") from None
            attrs.append({"op": op["id"], "name": name, "value": term})
    return {"version": SIZES_VERSION, "symbols": {"batch": batch}, "tensors": tensors, "attrs": attrs}


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
