"""The step's results assembled from every rank's kept pieces (loom.runtime.results.assemble): boxes placed,
replicas counted once, value parts summed; a tensor kept in two layouts (Mamba's tied embedding under megatron
tp: rows split for the lookup, columns split for the head) is the whole value once, and its layouts must agree."""

import pytest
import torch

from loom.runtime.results import ResultError, assemble

MANIFEST = {"tensors": {"w": {"shape": [6, 4], "dtype": "f32"}}}


def box(rows, cols, part=(0, 1)):
    return (((rows[0], rows[1], 1), (cols[0], cols[1], 1)), part)


def pieces_of(whole, layouts):
    """(name, piece, value) triples: every piece of every layout, as the ranks keep them."""
    return [("w", box(r, c), whole[r[0]:r[1], c[0]:c[1]].clone()) for layout in layouts for r, c in layout]


ROWS = [((0, 3), (0, 4)), ((3, 6), (0, 4))]
COLUMNS = [((0, 6), (0, 2)), ((0, 6), (2, 4))]


@pytest.mark.parametrize("layouts", [[ROWS], [COLUMNS], [ROWS, COLUMNS], [ROWS, ROWS, COLUMNS]],
                         ids=["rows", "columns", "rows and columns", "replicated rows and columns"])
def test_every_layout_gives_the_whole_value_once(layouts):
    whole = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    assert torch.equal(assemble(MANIFEST, pieces_of(whole, layouts))["w"], whole)


def test_layouts_that_disagree_are_refused():
    whole = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
    kept = pieces_of(whole, [ROWS, COLUMNS])
    kept[-1] = (kept[-1][0], kept[-1][1], kept[-1][2] + 1e-3)  # one column half off by a wrong step
    with pytest.raises(ResultError, match="differ where they overlap"):
        assemble(MANIFEST, kept)


def test_a_missing_piece_and_value_parts_on_a_whole_are_refused():
    whole = torch.randn(6, 4, generator=torch.Generator().manual_seed(2))
    with pytest.raises(ResultError, match="cover 0..1"):
        assemble(MANIFEST, pieces_of(whole, [ROWS])[:1])
    parts = [("w", box((0, 6), (0, 4), (k, 2)), whole / 2) for k in range(2)]
    assert torch.allclose(assemble(MANIFEST, parts)["w"], whole)
    with pytest.raises(ResultError, match="cover 2..2"):  # a value split and the whole: counted twice
        assemble(MANIFEST, parts + pieces_of(whole, [ROWS]))
