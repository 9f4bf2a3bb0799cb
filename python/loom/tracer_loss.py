"""Which of a traced model's outputs is the loss: the scalar it returns, its "loss" entry, or the only scalar
among its outputs; several or none is an error asking for loss=."""

from .lowering import T


def _traced_leaves(output, leaf, path="outputs"):
    """(path, traced tensor) of every traced tensor in the output, nested tuples, lists and dicts walked."""
    if isinstance(output, leaf):
        yield path, output
    elif isinstance(output, dict):
        for key, value in output.items():
            yield from _traced_leaves(value, leaf, f"{path}[{key!r}]")
    elif isinstance(output, (tuple, list)):
        for k, value in enumerate(output):
            yield from _traced_leaves(value, leaf, f"{path}[{k}]")


def _find_loss(output, shape, leaf=T):
    """The scalar the model (or the loss function) returns: itself; a dict's, a HuggingFace ModelOutput's or a
    named tuple's "loss"; else the only 0-d traced tensor among the outputs (`(logits, loss)`). None or
    several: a ValueError asking for loss=. leaf: the type of a traced tensor (the lowering's T; torch.Tensor
    for the outputs of the module that torch.export runs)."""
    named = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
    if isinstance(named, leaf) and shape(named) == []:
        return named
    scalars = [(path, t) for path, t in _traced_leaves(output, leaf) if shape(t) == []]
    if len(scalars) == 1:
        return scalars[0][1]
    if not scalars:
        raise ValueError("the traced model returns no scalar loss: return one (alone, as .loss, or the only scalar "
                         "of a tuple), or pass loss=lambda outputs, batch: ...")
    paths = ", ".join(path for path, _ in scalars)
    raise ValueError(f"the traced model returns {len(scalars)} scalars ({paths}), so which is the loss is not clear: "
                     f"pass loss=lambda outputs, batch: {scalars[0][0]} (or the one to train)")

