"""conv_pool (src/ops/conv_pool.cc): 2-d convolutions, pooling, nearest upsampling."""

import torch.nn.functional as F

from .common import pair


def _conv2d(attrs, inputs, outputs):
    stride, padding = pair(attrs, "stride", 1), pair(attrs, "padding", 0)
    dilation, groups = pair(attrs, "dilation", 1), int(attrs.get("groups", 1))
    (x_shape, _), (w_shape, _) = inputs[0], inputs[1]
    if groups > 1 and x_shape[1] < w_shape[1] * groups:
        # A shard of the channels holds whole groups (the signature splits g, never a group's channels): the
        # attribute counts the whole op's, the shard has as many as its input channels make.
        groups = x_shape[1] // w_shape[1]
    return lambda x, w, b=None: (F.conv2d(x, w, b, stride, padding, dilation, groups),)


def _conv_transpose2d(attrs, inputs, outputs):
    stride, padding = pair(attrs, "stride", 1), pair(attrs, "padding", 0)
    extra, dilation = pair(attrs, "output_padding", 0), pair(attrs, "dilation", 1)
    return lambda x, w, b=None: (F.conv_transpose2d(x, w, b, stride, padding, extra, 1, dilation),)


def _pool_builder(fn):
    def build(attrs, inputs, outputs):
        kernel = pair(attrs, "kernel", 1)
        stride = pair(attrs, "stride", list(kernel))
        padding = pair(attrs, "padding", 0)
        return lambda x: (fn(x, kernel, stride, padding),)

    return build


def _adaptive_pool(attrs, inputs, outputs):
    size = pair(attrs, "output_size", 1)
    return lambda x: (F.adaptive_avg_pool2d(x, size),)


def _upsample(attrs, inputs, outputs):
    scale = int(attrs["scale"])
    return lambda x: (F.interpolate(x, scale_factor=scale, mode="nearest"),)


FORWARD = {"conv2d": _conv2d, "conv_transpose2d": _conv_transpose2d, "max_pool2d": _pool_builder(F.max_pool2d),
           "avg_pool2d": _pool_builder(F.avg_pool2d), "adaptive_avg_pool2d": _adaptive_pool,
           "upsample_nearest2d": _upsample}
