"""swin (src/ops/swin.cc): Swin's window partition and reverse, cyclic shift, patch merging, and relative
position bias (its index built once, outside the callable)."""

import torch


def _window_partition(attrs, inputs, outputs):
    ws = int(attrs["window_size"])
    (b, h, w, c), _ = inputs[0]
    return lambda x: (x.reshape(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c),)


def _window_reverse(attrs, inputs, outputs):
    ws = int(attrs["window_size"])
    (b, h, w, c), _ = outputs[0]  # the local map; the attributes give the whole one
    return lambda x: (x.reshape(b, h // ws, w // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c),)


def _cyclic_shift(attrs, inputs, outputs):
    shift = int(attrs["shift"])
    return lambda x: (torch.roll(x, (shift, shift), (1, 2)),)


def _patch_merging(attrs, inputs, outputs):
    # Channel c * 4 + k holds 2x2 offset k in Swin's order (0,0), (1,0), (0,1), (1,1) as (dy, dx).
    def run(x):
        parts = (x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2])
        return (torch.stack(parts, dim=-1).flatten(-2),)

    return run


def _relative_position_bias(attrs, inputs, outputs):
    ws = int(attrs["window_size"])
    coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")).flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (ws - 1)
    index = (rel[..., 0] * (2 * ws - 1) + rel[..., 1]).reshape(-1)
    cached = {}

    def run(table):
        if table.device not in cached:
            cached[table.device] = index.to(table.device)
        heads = table.shape[1]
        return (table[cached[table.device]].view(ws * ws, ws * ws, heads).permute(2, 0, 1).contiguous(),)

    return run


FORWARD = {"window_partition": _window_partition, "window_reverse": _window_reverse, "cyclic_shift": _cyclic_shift,
           "patch_merging": _patch_merging, "relative_position_bias": _relative_position_bias}
