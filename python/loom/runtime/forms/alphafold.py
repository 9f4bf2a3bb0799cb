"""alphafold (src/ops/alphafold.cc): recycling's detach; the AlphaFold kernels have no torch form here."""


def _recycle_detach(attrs, inputs, outputs):
    return lambda x: (x.detach(),)


FORWARD = {"recycle_detach": _recycle_detach}
NOT_DIFFERENTIABLE = {"recycle_detach"}
UNSUPPORTED = {name: "AlphaFold kernels are not mapped to torch here" for name in (
    "msa_row_attention_with_pair_bias", "msa_column_attention", "triangle_attention", "triangle_multiplication",
    "outer_product_mean")}
