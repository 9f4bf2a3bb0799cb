"""alphafold (src/ops/alphafold.cc): the fused Evoformer ops as torch calls, as the reference kernels define
them (src/verify/kernels_alphafold.cc), and recycling's detach. Backwards run autograd over these forms.

Value-split parts: the gated attentions sum over heads and outer_product_mean over sequences, so a part that
does not start at 0 on that axis leaves out the output bias, and outer_product_mean divides by the whole
tensor's sequence count (PLACED)."""

import math

import torch
import torch.nn.functional as F


def _recycle_detach(attrs, inputs, outputs):
    return lambda x: (x.detach(),)


def _gated_attention(x, bias, w_qkvg, b_g, w_o, b_o):
    """x [..., L, c] attended along L: softmax(q k / sqrt(d) + bias) v, gated by sigmoid(w_g x + b_g), then
    w_o (b_o when given). w_qkvg [4 h d c]; bias broadcasts to [..., h, L, L]."""
    q, k, v, g = (torch.einsum("...lc,hdc->...lhd", x, w_qkvg[p]) for p in range(4))
    gate = torch.sigmoid(g + b_g)
    logits = torch.einsum("...ihd,...jhd->...hij", q, k) / math.sqrt(w_qkvg.shape[2])
    if bias is not None:
        logits = logits + bias
    mixed = torch.einsum("...hij,...jhd->...ihd", torch.softmax(logits, dim=-1), v)
    out = torch.einsum("...ihd,ehd->...ie", gate * mixed, w_o)
    return out + b_o if b_o is not None else out


def _pair_bias(z, w_bias, transposed):
    """bias[b, h, q, k] = sum_y w_bias[h, y] z[b, q, k, y] (z[b, k, q] when transposed), broadcast over the
    sequences of a batch: [b, 1, h, L, L]."""
    return torch.einsum("bkqy,hy->bhqk" if transposed else "bqky,hy->bhqk", z, w_bias).unsqueeze(1)


def _msa_row(add_bias):
    # m [b s r c] rows attend along r, biased by the pair z [b r r y].
    return lambda m, z, w_qkvg, b_g, w_bias, w_o, b_o: (
        _gated_attention(m, _pair_bias(z, w_bias, False), w_qkvg, b_g, w_o, b_o if add_bias else None),)


def _msa_column(add_bias):
    # m [b s r c] columns attend along s.
    return lambda m, w_qkvg, b_g, w_o, b_o: (
        _gated_attention(m.transpose(1, 2), None, w_qkvg, b_g, w_o, b_o if add_bias else None).transpose(1, 2),)


def _triangle_attention(ending, add_bias):
    # Starting node: row i attends along j, bias z[j, k]; ending node: column j along i, bias z[k, i].
    def run(z, z_bias, w_qkvg, b_g, w_bias, w_o, b_o):
        x = z.transpose(1, 2) if ending else z
        out = _gated_attention(x, _pair_bias(z_bias, w_bias, ending), w_qkvg, b_g, w_o, b_o if add_bias else None)
        return (out.transpose(1, 2) if ending else out,)
    return run


def _triangle_multiplication(attrs, inputs, outputs):
    incoming = attrs.get("mode") == "incoming"
    hidden = [inputs[3][0][1]]

    def run(z_a, z_b, z_g, w_ab, b_ab, ln_w, ln_b, w_o, b_o, w_g, b_g):
        a = torch.sigmoid(F.linear(z_a, w_ab[1], b_ab[1])) * F.linear(z_a, w_ab[0], b_ab[0])
        b = torch.sigmoid(F.linear(z_b, w_ab[3], b_ab[3])) * F.linear(z_b, w_ab[2], b_ab[2])
        product = torch.einsum("bkic,bkjc->bijc" if incoming else "bikc,bjkc->bijc", a, b)
        value = F.linear(F.layer_norm(product, hidden, ln_w, ln_b, 1e-5), w_o, b_o)
        return (torch.sigmoid(F.linear(z_g, w_g, b_g)) * value,)
    return run


def _outer_product_mean(sequences, add_bias):
    # out[i, j] = w_o flatten(sum_s a[s, i] (x) b[s, j] / sequences) + b_o.
    def run(m_left, m_right, w_ab, b_ab, w_o, b_o):
        a = F.linear(m_left, w_ab[0], b_ab[0])
        b = F.linear(m_right, w_ab[1], b_ab[1])
        outer = torch.einsum("nsip,nsjq->nijpq", a, b) / sequences
        return (F.linear(outer.flatten(-2), w_o, b_o if add_bias else None),)
    return run


def _starts_at_zero(spec, dim):
    return spec["offset"][dim] == 0


FORWARD = {
    "recycle_detach": _recycle_detach,
    "msa_row_attention_with_pair_bias": lambda attrs, inputs, outputs: _msa_row(True),
    "msa_column_attention": lambda attrs, inputs, outputs: _msa_column(True),
    "triangle_attention": lambda attrs, inputs, outputs: _triangle_attention(attrs.get("mode") == "ending", True),
    "triangle_multiplication": _triangle_multiplication,
    "outer_product_mean": lambda attrs, inputs, outputs: _outer_product_mean(inputs[0][0][1], True),
}
# A head-split part after the first leaves out b_o (heads of w_qkvg, input 2 or 1); a sequence-split
# outer_product_mean divides by the whole count and only its first part adds b_o.
PLACED = {
    "msa_row_attention_with_pair_bias": lambda attrs, inputs, outputs: (
        None if _starts_at_zero(inputs[2], 1) else _msa_row(False)),
    "msa_column_attention": lambda attrs, inputs, outputs: (
        None if _starts_at_zero(inputs[1], 1) else _msa_column(False)),
    "triangle_attention": lambda attrs, inputs, outputs: (
        None if _starts_at_zero(inputs[2], 1) else _triangle_attention(attrs.get("mode") == "ending", False)),
    "outer_product_mean": lambda attrs, inputs, outputs: (
        None if inputs[0]["shape"][1] == inputs[0]["full"][1]
        else _outer_product_mean(inputs[0]["full"][1], _starts_at_zero(inputs[0], 1))),
}
NOT_DIFFERENTIABLE = {"recycle_detach"}
