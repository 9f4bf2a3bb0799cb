"""The runtime's local instructions and initial values, against exec_plan.h's rules and verify's generator."""

import pytest
import torch

from loom.runtime import geometry
from loom.runtime.initial import initial_value

W = torch.arange(24, dtype=torch.float64).reshape(4, 6)
WHOLE = ((0, 4, 1), (0, 6, 1))


def test_slice_restricts_a_strided_box_and_keeps_the_value_part():
    out = geometry.slice_piece(W, (WHOLE, (0, 1)), (((1, 3, 1), (0, 6, 2)), (0, 1)))
    assert out.tolist() == [[6, 8, 10], [12, 14, 16]]
    with pytest.raises(geometry.PieceError, match="value part"):
        geometry.slice_piece(W, (WHOLE, (0, 1)), (WHOLE, (0, 2)))


def test_scale_splits_a_value_and_back():
    half = geometry.scale_piece(W, (WHOLE, (0, 1)), (WHOLE, (1, 2)))
    assert torch.equal(half, W / 2)
    assert torch.equal(geometry.scale_piece(half, (WHOLE, (1, 2)), (WHOLE, (0, 1))), W)


def test_combine_sums_parts_tiling_the_whole_times_the_output_fraction():
    parts = [(W / 4, (WHOLE, (k, 4))) for k in range(4)]
    assert torch.allclose(geometry.combine(parts, (WHOLE, (0, 1))), W)
    assert torch.allclose(geometry.combine(parts, (WHOLE, (1, 2))), W / 2)


def test_combine_concatenates_boxes_of_the_output_part():
    top, bottom = W[:2] / 2, W[2:] / 2
    out = geometry.combine([(top, (((0, 2, 1), (0, 6, 1)), (1, 2))), (bottom, (((2, 4, 1), (0, 6, 1)), (1, 2)))],
                           (WHOLE, (1, 2)))
    assert torch.equal(out, W / 2)


def test_combine_sums_distinct_parts_of_a_finer_decomposition_as_a_coarser_part():
    # Parts 0 and 1 of 4 summed are part 0 of 2 (a device's micro-batch partial sums).
    out = geometry.combine([(W, (WHOLE, (0, 4))), (2 * W, (WHOLE, (1, 4)))], (WHOLE, (0, 2)))
    assert torch.equal(out, 3 * W)


def test_combine_without_a_tiling_names_the_pieces():
    with pytest.raises(geometry.PieceError, match="no value parts tile"):
        geometry.combine([(W, (WHOLE, (0, 4))), (W, (WHOLE, (2, 4)))], (WHOLE, (0, 1)))


def test_gather_places_each_element_from_exactly_one_distinct_piece():
    pieces = [(W[:, :3], ((WHOLE[0], (0, 3, 1)), (0, 1))), (W[:, 3:], ((WHOLE[0], (3, 6, 1)), (0, 1))),
              (W[:, 3:], ((WHOLE[0], (3, 6, 1)), (0, 1)))]  # a replica counts once
    assert torch.equal(geometry.gather_pieces(pieces, WHOLE), W)
    with pytest.raises(geometry.PieceError, match="exactly one"):
        geometry.gather_pieces(pieces[:1], WHOLE)


def test_coarsest_tiling_prefers_fewer_parts():
    parts = [(0, 4), (1, 4), (0, 2), (1, 2)]
    assert sorted(geometry.coarsest_tiling(parts, [0, 1, 2, 3], (0, 1))) == [2, 3]
    assert geometry.coarsest_tiling(parts, [0, 3], (0, 1)) == []


def test_initial_values_are_verify_s():
    # The same golden numbers as tests/codegen/initial_values_test.cc pins for verify::initial_values.
    tensors = {"wte.weight": {"shape": [64, 16], "dtype": "f32", "init": "uniform"},
               "input_ids": {"shape": [4, 8], "dtype": "i64", "init": "integer", "bound": 64}}
    wte = initial_value("wte.weight", tensors["wte.weight"], 1, tensors).reshape(-1)
    assert wte[:3].tolist() == [-0.21147801760475704, 0.2720064732322971, 0.36819606847866904]
    assert wte[-1].item() == -0.1549652195542246
    assert initial_value("input_ids", tensors["input_ids"], 1, tensors).reshape(-1)[:6].tolist() == [0, 37, 12, 37, 16, 55]


def _random_box(rng, shape):
    box = []
    for n in shape:
        step = int(rng.integers(1, 3))
        start = int(rng.integers(0, n))
        stop = int(rng.integers(start + 1, n + 1))
        box.append((start, stop, step))
    return tuple(box)


def _elements(box):
    import itertools
    return itertools.product(*[range(*r) for r in box])


def test_place_and_restrict_agree_with_element_by_element_copies():
    # Property: over random strided boxes, every element lands where its global index says.
    import numpy as np
    rng = np.random.default_rng(7)
    for _ in range(300):
        shape = tuple(int(n) for n in rng.integers(1, 7, size=int(rng.integers(1, 4))))
        whole = torch.randn(shape, dtype=torch.float64)
        src_box, dst_box = _random_box(rng, shape), _random_box(rng, shape)
        src = geometry.restrict(whole, geometry.local_shape_box(shape), src_box)
        for local, index in zip(_elements(tuple((0, n, 1) for n in src.shape)), _elements(src_box)):
            assert src[local] == whole[index]
        values, mask = geometry.place(dst_box, src, src_box)
        src_set = set(_elements(src_box))
        for local, index in zip(_elements(tuple((0, n, 1) for n in values.shape)), _elements(dst_box)):
            assert bool(mask[local]) == (index in src_set)
            assert values[local] == (whole[index] if index in src_set else 0)


def test_combine_of_inputs_holding_the_output_box_sums_them_into_a_new_tensor():
    """The path for a device's partial sums of one box (sub-batches', micro-batches' weight gradients): the same
    values as the general rule, and never the input itself (a later in-place update must not reach it)."""
    parts = [(W / 4 * (k + 1), (WHOLE, (k, 4))) for k in range(4)]
    assert torch.allclose(geometry.combine(parts, (WHOLE, (0, 1))), W * 10 / 4)
    one = geometry.combine([(W, (WHOLE, (0, 1)))], (WHOLE, (0, 1)))
    assert torch.equal(one, W) and one.data_ptr() != W.data_ptr()
