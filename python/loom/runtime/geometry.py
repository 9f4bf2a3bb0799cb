"""Pieces of a tensor as the ExecPlan names them, and the data semantics of the instructions that move them.

A piece is (box, part): box a tuple of (start, stop, step) per dimension of the whole tensor, part the value
part (index, count): the piece holds its box of the whole times 1/count when count > 1 (exec_plan.h). These
functions are the torch forms of the float64 interpreter's (src/verify/exec_semantics.cc, plan_assembly.cc):
restrict (slice), scale, combine (value-part tilings per element), sum and gather placement.
"""

import math

import torch


class PieceError(ValueError):
    """A piece does not hold what an instruction needs; the message names the pieces."""


def local_shape(box):
    return tuple(max(0, -(-(stop - start) // step)) for start, stop, step in box)


def _indices(box_range):
    start, stop, step = box_range
    return range(start, stop, step)


def _common(dst_range, src_range):
    """Positions in dst's and in src's local frame of the global indices both ranges hold."""
    s_start, s_stop, s_step = src_range
    dst_pos, src_pos = [], []
    for k, g in enumerate(_indices(dst_range)):
        if s_start <= g < s_stop and (g - s_start) % s_step == 0:
            dst_pos.append(k)
            src_pos.append((g - s_start) // s_step)
    return dst_pos, src_pos


def _select(tensor, positions):
    for d, pos in enumerate(positions):
        if len(pos) != tensor.shape[d] or pos != list(range(len(pos))):
            tensor = tensor.index_select(d, torch.tensor(pos, dtype=torch.long, device=tensor.device))
    return tensor


def place(dst_box, src, src_box):
    """(values, mask) in dst's frame: src's values where its box meets dst's box, zero and False elsewhere."""
    shape = local_shape(dst_box)
    values = torch.zeros(shape, dtype=src.dtype, device=src.device)
    mask = torch.zeros(shape, dtype=torch.bool, device=src.device)
    if not dst_box:
        values.copy_(src)
        mask.fill_(True)
        return values, mask
    pairs = [_common(d, s) for d, s in zip(dst_box, src_box)]
    if any(not dst_pos for dst_pos, _ in pairs):
        return values, mask
    chosen = _select(src, [src_pos for _, src_pos in pairs])
    index = torch.meshgrid(*[torch.tensor(dst_pos, dtype=torch.long, device=src.device) for dst_pos, _ in pairs],
                           indexing="ij")
    values.index_put_(index, chosen)
    mask.index_put_(index, torch.ones_like(chosen, dtype=torch.bool))
    return values, mask


def contains(outer_box, inner_box):
    return all(all(o[0] <= g < o[1] and (g - o[0]) % o[2] == 0 for g in _indices(i))
               for o, i in zip(outer_box, inner_box))


def restrict(src, src_box, dst_box):
    """src's values over dst_box, which src_box must contain (slice, and a sum collective's output)."""
    if not contains(src_box, dst_box):
        raise PieceError(f"box {src_box} does not contain {dst_box}")
    if not dst_box:
        return src.clone()
    return _select(src, [_common(d, s)[1] for d, s in zip(dst_box, src_box)]).contiguous()


def slice_piece(x, in_piece, out_piece):
    (in_box, in_part), (out_box, out_part) = in_piece, out_piece
    if tuple(in_part) != tuple(out_part):
        raise PieceError(f"slice of {in_piece} into {out_piece} changes the value part")
    return restrict(x, in_box, out_box)


def scale_piece(x, in_piece, out_piece):
    """A value split and back: out = in x (in count / out count), same box."""
    (in_box, in_part), (out_box, out_part) = in_piece, out_piece
    if tuple(map(tuple, in_box)) != tuple(map(tuple, out_box)):
        raise PieceError(f"scale of {in_piece} into {out_piece} changes the box")
    return x * (in_part[1] / out_part[1])


def coarsest_tiling(parts, candidates, target):
    """The fewest candidates (indices into parts, tried in order) whose value intervals tile target's: a
    breadth-first search over interval endpoints scaled by the lcm of the counts. [] when none tiles."""
    denominator = target[1]
    for c in candidates:
        denominator = math.lcm(denominator, parts[c][1])

    def point(index, count):
        return index * (denominator // count)

    begin, end = point(*target), point(target[0] + 1, target[1])
    via = {begin: None}
    queue = [begin]
    while queue and end not in via:
        at = queue.pop(0)
        for c in candidates:
            index, count = parts[c]
            nxt = point(index + 1, count)
            if point(index, count) != at or nxt > end or nxt in via:
                continue
            via[nxt] = c
            queue.append(nxt)
    if end not in via:
        return []
    chosen, at = [], end
    while at != begin:
        c = via[at]
        chosen.append(c)
        at = point(*parts[c])
    return chosen


def _parts_of_one_decomposition(inputs, out_piece):
    out_box, out_part = out_piece
    counts = {tuple(part)[1] for _, (_, part) in inputs}
    indices = [part[0] for _, (_, part) in inputs]
    same_box = all(tuple(map(tuple, box)) == tuple(map(tuple, out_box)) for _, (box, _) in inputs)
    return (same_box and len(counts) == 1 and len(set(indices)) == len(indices)
            and len(inputs) * out_part[1] == counts.pop())


def combine(inputs, out_piece, tensor_name=""):
    """exec_plan.h's combine: at each element, inputs tiling the whole, summed, times the output's fraction;
    failing that, inputs tiling the output's own part, summed; failing both, inputs of the output's box that
    are k distinct parts of one decomposition of k x the output's count, summed as is."""
    out_box, out_part = out_piece
    parts = [tuple(part) for _, (_, part) in inputs]
    if all(_same_box(box, out_box) for _, (box, _) in inputs):
        # Every element has every input (a device's partial sums of one weight gradient, one per micro-batch
        # or sub-batch): one choice for the whole box, without the per-element masks, which cost more than
        # the sums on large tensors.
        choice = _choose(inputs, parts, list(range(len(inputs))), out_piece, tensor_name, "every element")
        if choice is None:
            return sum_pieces(inputs, out_box)
        chosen, factor = choice
        total = inputs[chosen[0]][0].reshape(local_shape(out_box))
        for c in chosen[1:]:
            total = total + inputs[c][0].reshape(local_shape(out_box))
        return total * factor if factor != 1.0 else total.clone()  # a new tensor, as below
    placed = [place(out_box, x, box) for x, (box, _) in inputs]
    device = inputs[0][0].device
    signature = torch.zeros(local_shape(out_box), dtype=torch.long, device=device)
    for i, (_, mask) in enumerate(placed):
        signature |= mask.long() << i
    out = torch.zeros(local_shape(out_box), dtype=inputs[0][0].dtype, device=device)
    for sig in torch.unique(signature).tolist():
        candidates = [i for i in range(len(inputs)) if (sig >> i) & 1]
        choice = _choose(inputs, parts, candidates, out_piece, tensor_name, f"signature {sig}")
        if choice is None:
            return sum_pieces(inputs, out_box)
        chosen, factor = choice
        where = signature == sig
        total = placed[chosen[0]][0][where]
        for c in chosen[1:]:
            total = total + placed[c][0][where]
        out[where] = total * factor if factor != 1.0 else total
    return out


def _choose(inputs, parts, candidates, out_piece, tensor_name, where):
    """combine's rule over the inputs `candidates` holding an element: (the inputs summed, the factor), or None
    when the inputs are distinct parts of one decomposition of the output's box (summed as is)."""
    out_part = out_piece[1]
    chosen, factor = coarsest_tiling(parts, candidates, (0, 1)), 1.0 / out_part[1]
    if not chosen:
        chosen, factor = coarsest_tiling(parts, candidates, tuple(out_part)), 1.0
    if chosen:
        return chosen, factor
    if _parts_of_one_decomposition(inputs, out_piece):
        return None
    raise PieceError(f"combine into '{tensor_name}' {out_piece}: no value parts tile the element set with "
                     f"pieces {[p for _, p in inputs]} at {where}")


def _same_box(a, b):
    return len(a) == len(b) and all(_indices(x) == _indices(y) for x, y in zip(a, b))  # ranges compare in O(1)


def sum_pieces(inputs, out_box):
    """The sum of every input restricted to out_box (all-reduce, reduce-scatter)."""
    total = None
    for x, (box, _) in inputs:
        part = restrict(x, box, out_box)
        total = part if total is None else total + part
    return total


def same_piece(a, b):
    (a_box, a_part), (b_box, b_part) = a, b
    return tuple(a_part) == tuple(b_part) and all(
        list(_indices(x)) == list(_indices(y)) for x, y in zip(a_box, b_box)) and len(a_box) == len(b_box)


def gather_pieces(inputs, out_box, what=""):
    """Each element of out_box from the one distinct input piece holding it (all-gather, all-to-all);
    replicas (equal pieces) count once."""
    distinct = []
    for x, piece in inputs:
        if not any(same_piece(piece, p) for _, p in distinct):
            distinct.append((x, piece))
    out, held = None, None
    for x, (box, _) in distinct:
        values, mask = place(out_box, x, box)
        out = values if out is None else torch.where(mask, values, out)
        held = mask.long() if held is None else held + mask.long()
    if held is not None and bool((held != 1).any()):
        raise PieceError(f"{what}: output {out_box} has elements held by {int(held.min())}..{int(held.max())} "
                         f"distinct input pieces, not exactly one")
    return out


def local_shape_box(shape):
    """The box of a whole tensor of this shape."""
    return tuple((0, n, 1) for n in shape)
