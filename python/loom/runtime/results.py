"""The step's results gathered from every rank: each kept piece placed into its whole tensor."""

import torch

from . import geometry
from .initial import DTYPES


class ResultError(ValueError):
    """The kept pieces do not make up a whole tensor; the message names it."""


def assemble(manifest, kept):
    """{tensor name: whole value} from (name, piece, value) triples of all ranks. Equal pieces (replicas)
    count once; whole pieces are placed by their boxes, value parts (k of n) are summed. A tensor kept in two
    layouts (a tied embedding: split by rows for the lookup, by columns for the head) has whole pieces that
    overlap without being equal: where they overlap they must hold the same values (REPLICA_RTOL), and count
    once."""
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
        held = torch.zeros(shape, dtype=torch.bool)  # elements a whole piece already gave
        for (box, (index, count)), value in pieces:
            placed, mask = geometry.place(whole_box, value, box)
            if count == 1:
                _check_replicas(name, out, placed, mask & held)
                mask = mask & ~held
                held |= mask
                placed = torch.where(mask, placed, torch.zeros((), dtype=placed.dtype))
            out = out + placed
            covered = covered + mask.double() / count
        if not torch.allclose(covered, torch.ones_like(covered)):
            raise ResultError(f"tensor '{name}': the kept pieces cover {float(covered.min()):g}..{float(covered.max()):g} "
                              f"of each element, not exactly the whole")
        values[name] = out.to(DTYPES.get(entry["dtype"], out.dtype)) if out.is_floating_point() else out
    return values


# Two layouts of one tensor are computed by the same elementwise steps from the same values: equal but for
# the rounding of a step computed in another vector width.
REPLICA_RTOL = 1e-6


def _check_replicas(name, have, placed, overlap):
    if not overlap.any():
        return
    a, b = have[overlap], placed[overlap]
    if a.is_floating_point():
        scale = max(a.abs().max().item(), b.abs().max().item(), 1e-30)
        off = (a.double() - b.double()).abs().max().item() / scale
        if not off <= REPLICA_RTOL:
            raise ResultError(f"tensor '{name}': two kept pieces differ where they overlap (relative {off:.2e})")
    elif not torch.equal(a, b):
        raise ResultError(f"tensor '{name}': two kept pieces differ where they overlap")
