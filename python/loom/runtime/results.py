"""The step's results gathered from every rank: each kept piece placed into its whole tensor."""

import torch

from . import geometry
from .initial import DTYPES


class ResultError(ValueError):
    """The kept pieces do not make up a whole tensor; the message names it."""


def assemble(manifest, kept):
    """{tensor name: whole value} from (name, piece, value) triples of all ranks. Equal pieces (replicas)
    count once; whole pieces are placed by their boxes, value parts (k of n) are summed."""
    by_name = {}
    for name, piece, value in kept:
        pieces = by_name.setdefault(name, [])
        if not any(geometry.same_piece(piece, p) for p, _ in pieces):
            pieces.append((piece, value))
    values = {}
    for name, pieces in sorted(by_name.items()):
        entry = manifest["tensors"][name]
        shape = tuple(entry["shape"])
        whole_box = geometry.local_shape_box(shape)
        out = torch.zeros(shape, dtype=pieces[0][1].dtype)
        covered = torch.zeros(shape, dtype=torch.float64)
        for (box, (index, count)), value in pieces:
            placed, mask = geometry.place(whole_box, value, box)
            out = out + placed
            covered = covered + mask.double() / count
        if not torch.allclose(covered, torch.ones_like(covered)):
            raise ResultError(f"tensor '{name}': the kept pieces cover {float(covered.min()):g}..{float(covered.max()):g} "
                              f"of each element, not exactly the whole")
        values[name] = out.to(DTYPES.get(entry["dtype"], out.dtype)) if out.is_floating_point() else out
    return values
