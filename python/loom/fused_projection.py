"""Fused projections cut into equal parts, laid out so that tensor parallelism gives each rank whole heads.

HuggingFace's GPT-2 computes q, k and v with one Conv1D, weight [k, 3n], and splits its output along the
last dim: `c_attn(x).split(n, dim=2)`. A contiguous split of that weight's 3n columns over tp ranks
would give rank 0 all of q and part of k, so the engine could only replicate attention. Viewing the
weight as [k, 3, n] (the same elements in the same order: a view, not a copy) makes the product an
einsum "mk,kpn->mpn" whose 'n' splits per part (each rank gets the same heads of q, k and v), as
Megatron lays out its fused QKV.

The rewrite runs on the built graph, before `finish`: for each `split`/`chunk` of the last dim into P
equal parts whose input comes, through views that keep the last dim, from `matmul(x, W)` (+ bias) with W
a parameter [k, P*n] that nothing else reads. The parameter (and its bias [P*n]) then has shape [k, P, n]
([P, n]) in the graph: a consumer of the graph maps it to the module's parameter with `.view(shape)`.
"""

_VIEWS = ("view", "reshape")
_LEADING = "abcdefghijlmoqrstuvwxyz"  # einsum letters for the activation's leading dims (not k, n, p)


def split_fused_projections(graph):
    """Rewrites every fused projection that a split of equal parts cuts (see the module doc) in place."""
    readers = _readers(graph)
    producer = {t: k for k, op in enumerate(graph.ops) for t in op["outputs"]}
    rewrites = []
    for k, op in enumerate(graph.ops):
        found = _match(graph, k, readers, producer)
        if found:
            rewrites.append((k, found))
    # Back to front: inserting the squeezes after a split leaves earlier positions valid.
    for k, (parts, chain, matmul, add) in reversed(rewrites):
        _rewrite(graph, k, parts, chain, matmul, add)


def _readers(graph):
    readers = {}
    for k, op in enumerate(graph.ops):
        for t in set(op["inputs"]):
            readers.setdefault(t, []).append(k)
    return readers


def _equal_parts_of_last_dim(graph, op):
    if op["type"] not in ("split", "chunk") or len(op["outputs"]) < 2:
        return None
    shape = graph.tensors[op["inputs"][0]]["shape"]
    if op["attrs"].get("dim", 0) % len(shape) != len(shape) - 1:
        return None
    sizes = [graph.tensors[t]["shape"][-1] for t in op["outputs"]]
    if len(set(sizes)) != 1 or sum(sizes) != shape[-1]:
        return None
    return len(sizes)


def _match(graph, position, readers, producer):
    split = graph.ops[position]
    parts = _equal_parts_of_last_dim(graph, split)
    if parts is None:
        return None
    only_reader = lambda t, k: readers.get(t) == [k]  # noqa: E731
    t, reader = split["inputs"][0], position
    chain = []  # the views between the product and the split, last first
    while True:
        if not only_reader(t, reader) or t not in producer:
            return None
        k = producer[t]
        op = graph.ops[k]
        if op["type"] in _VIEWS:
            if graph.tensors[op["inputs"][0]]["shape"][-1] != graph.tensors[t]["shape"][-1]:
                return None
            chain.append(k)
            t, reader = op["inputs"][0], k
            continue
        break
    add = None
    if op["type"] == "add":
        a, bias = op["inputs"]
        if not _is_parameter(graph, bias, rank=1) or not only_reader(bias, k) or a not in producer \
                or not only_reader(a, k):
            return None
        add, k = k, producer[a]
        op = graph.ops[k]
    if op["type"] != "matmul":
        return None
    x, w = op["inputs"]
    if not _is_parameter(graph, w, rank=2) or not only_reader(w, k) or graph.tensors[w]["shape"][1] % parts:
        return None
    if add is not None and graph.tensors[graph.ops[add]["inputs"][1]]["shape"] != [graph.tensors[w]["shape"][1]]:
        return None
    if len(graph.tensors[x]["shape"]) - 1 > len(_LEADING):
        return None
    return parts, chain, k, add


def _is_parameter(graph, t, rank):
    return graph.tensors[t]["role"] == "parameter" and len(graph.tensors[t]["shape"]) == rank


def _cut_last(shape, parts):
    return list(shape[:-1]) + [parts, shape[-1] // parts]


def _rewrite(graph, k, parts, chain, matmul, add):
    tensors, ops = graph.tensors, graph.ops
    x, w = ops[matmul]["inputs"]
    lead = _LEADING[:len(tensors[x]["shape"]) - 1]
    ops[matmul]["type"] = "einsum"
    ops[matmul]["attrs"] = {"equation": f"{lead}k,kpn->{lead}pn"}
    reshaped = [w, ops[matmul]["outputs"][0]]
    if add is not None:
        reshaped += [ops[add]["inputs"][1], ops[add]["outputs"][0]]
    for view in chain:
        reshaped.append(ops[view]["outputs"][0])
        ops[view]["attrs"] = {**ops[view]["attrs"], "shape": _cut_last(ops[view]["attrs"]["shape"], parts)}
    for t in reshaped:
        tensors[t]["shape"] = _cut_last(tensors[t]["shape"], parts)
    # The split now cuts the parts' dim into P pieces of 1; a squeeze gives each piece its old shape.
    split = ops[k]
    rank = len(tensors[split["inputs"][0]]["shape"])
    old_outputs = split["outputs"]
    pieces = []
    for t in old_outputs:
        piece = dict(tensors[t])
        piece["name"] = f"{piece['name']}.piece"
        piece["shape"] = list(piece["shape"][:-1]) + [1, piece["shape"][-1]]
        tensors.append(piece)
        pieces.append(len(tensors) - 1)
    split["type"] = "split"
    split["attrs"] = {"sizes": [1] * parts, "dim": rank - 2}
    split["outputs"] = pieces
    squeezes = [{"name": f"{tensors[t]['name']}.squeeze", "type": "squeeze", "inputs": [piece], "outputs": [t],
                 "attrs": {"dim": rank - 2}} for piece, t in zip(pieces, old_outputs)]
    ops[k + 1:k + 1] = squeezes
