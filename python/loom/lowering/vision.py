"""Handlers of image ops (src/ops/conv_pool.cc, norm.cc): convolution, batch norm and pooling of NCHW images,
attributes as [height, width] pairs."""

import torch
import torch.nn.functional as F

from .base import Meta, T, _arg


def _pair(value):
    return [int(v) for v in value] if isinstance(value, (tuple, list)) else [int(value), int(value)]


def _conv2d(cx, args, kwargs, value):
    x, weight, bias = args[0], _arg(args, kwargs, 1, "weight"), _arg(args, kwargs, 2, "bias")
    stride, padding = _arg(args, kwargs, 3, "stride", 1), _arg(args, kwargs, 4, "padding", 0)
    dilation, groups = _arg(args, kwargs, 5, "dilation", 1), int(_arg(args, kwargs, 6, "groups", 1))
    if cx.rank(x) != 4:
        return None  # an unbatched image [c h w]
    kernel = list(cx.shape(cx.tensor(weight))[2:])
    if padding == "valid":
        padding = 0
    elif padding == "same":  # symmetric only: an even reach would pad one side more
        reach = [d * (k - 1) for d, k in zip(_pair(dilation), kernel)]
        if any(r % 2 for r in reach):
            return None
        padding = [r // 2 for r in reach]
    attrs = {"stride": _pair(stride), "padding": _pair(padding), "dilation": _pair(dilation)}
    if groups != 1:
        attrs["groups"] = groups
    inputs = [x, cx.tensor(weight)] + ([cx.tensor(bias)] if bias is not None else [])
    return cx.emit("conv2d", inputs, attrs, value)


def _conv1d(cx, args, kwargs, value):
    """A 1-D convolution of [n c l] as the engine's conv2d of [n c 1 l] (Mamba's depthwise causal conv):
    the input and the weight [co ci/g k] get a unit height, the result loses it."""
    x, weight, bias = args[0], cx.tensor(_arg(args, kwargs, 1, "weight")), _arg(args, kwargs, 2, "bias")
    stride, padding = _arg(args, kwargs, 3, "stride", 1), _arg(args, kwargs, 4, "padding", 0)
    dilation, groups = _arg(args, kwargs, 5, "dilation", 1), int(_arg(args, kwargs, 6, "groups", 1))
    one = lambda v: v[0] if isinstance(v, (tuple, list)) else v  # noqa: E731: conv1d's tuples have one entry
    if cx.rank(x) != 3 or isinstance(padding, str):
        return None
    planar = cx.emit("unsqueeze", [x], {"dim": 2}, cx.shape_after_unsqueeze(x, 2), suffix="planar")
    kernel = cx.emit("unsqueeze", [weight], {"dim": 2}, cx.shape_after_unsqueeze(weight, 2), suffix="kernel")
    attrs = {"stride": [1, int(one(stride))], "padding": [0, int(one(padding))], "dilation": [1, int(one(dilation))]}
    if groups != 1:
        attrs["groups"] = groups
    inputs = [planar, kernel] + ([cx.tensor(bias)] if bias is not None else [])
    shape = list(value.shape)
    out = cx.emit("conv2d", inputs, attrs, Meta(shape[:2] + [1] + shape[2:], value.dtype), suffix="conv2d")
    return cx.emit("squeeze", [out], {"dim": 2}, value)


def _module_conv1d(cx, m, args, kwargs, value):
    if m.padding_mode != "zeros":
        return None
    return _conv1d(cx, [args[0], m.weight, m.bias, m.stride, m.padding, m.dilation, m.groups], {}, value)


def _hardswish(cx, args, kwargs, value):
    """x * relu6(x + 3) / 6 (LeViT, MobileNet V3)."""
    x = args[0]
    meta = Meta(cx.shape(x), cx.torch_dtype(x))
    shifted = cx.emit("add", [x, cx.constant(torch.tensor(3.0, dtype=cx.torch_dtype(x)))], {}, meta, suffix="plus3")
    gate = cx.emit("clamp", [shifted], {"min": 0.0, "max": 6.0}, meta, suffix="relu6")
    return cx.emit("scale", [cx.emit("mul", [x, gate], {}, meta, suffix="gated")], {"factor": 1.0 / 6.0}, value)


def _batch_norm(cx, args, kwargs, value):
    """Training mode normalizes with the batch's statistics, as the engine's batch-norm parts
    (src/ops/batch_norm_parts.cc): per-channel sums over batch and space that a data-parallel plan
    all-reduces (SyncBatchNorm's statistics), then the normalization from the sums, so a plan that splits
    the batch trains as one device. The running statistics torch updates on the side (float32 buffers and a
    momentum) become ops of the step writing the buffers' next versions, as torch computes them:
    (1 - momentum) x running + momentum x the batch's mean (variance: unbiased, sum / (count - 1)).
    A module's num_batches_tracked counts the steps (momentum None, a cumulative average, is not lowered).
    The running statistics come as the module's buffers (fx) or as the graph's state tensors (export); float64
    ones (a model in double) get the statistics cast to float64."""
    x, weight, bias = args[0], _arg(args, kwargs, 3, "weight"), _arg(args, kwargs, 4, "bias")
    training, eps = _arg(args, kwargs, 5, "training", False), float(_arg(args, kwargs, 7, "eps", 1e-5))
    if not training:
        return None  # inference normalizes with the running statistics: no engine op says that
    channels = cx.shape(x)[1]
    dtype = cx.torch_dtype(x)
    weight = cx.tensor(weight) if weight is not None else cx.constant(torch.ones(channels, dtype=dtype))
    bias = cx.tensor(bias) if bias is not None else cx.constant(torch.zeros(channels, dtype=dtype))
    per_channel = Meta([channels], torch.float32)
    total, count = cx.emit_many("batch_norm_sums", [x], {}, [per_channel, per_channel], suffix="sums")
    squares = cx.emit("batch_norm_centered_sums", [x, total, count], {}, per_channel, suffix="squares")
    out = cx.emit("batch_norm_from_sums", [x, total, squares, count, weight, bias], {"eps": eps}, value)
    running = (_arg(args, kwargs, 1, "running_mean"), _arg(args, kwargs, 2, "running_var"))
    momentum = _arg(args, kwargs, 6, "momentum", 0.1)
    kinds = {cx.torch_dtype(r) for r in running if isinstance(r, (T, torch.Tensor))}
    if len(kinds) == 1 and len(running) == 2 and kinds <= {torch.float32, torch.float64} and momentum is not None:
        mean = cx.emit("div", [total, count], {}, per_channel, suffix="batch_mean")
        less_one = cx.emit("add", [count, cx.constant(torch.tensor(-1.0))], {}, per_channel, suffix="count_less_one")
        variance = cx.emit("div", [squares, less_one], {}, per_channel, suffix="batch_var")
        kind = kinds.pop()  # float64 buffers (a model in double): the float32 statistics cast to theirs
        stats = Meta([channels], kind)
        for stat, buffer in zip((mean, variance), running):
            name = "running_mean" if stat is mean else "running_var"
            if kind != torch.float32:
                stat = cx.emit("cast", [stat], {"dtype": cx.dtype_name(kind)}, stats, suffix=f"{name}.batch_cast")
            old = buffer if isinstance(buffer, T) else cx.state_buffer(buffer)
            kept = cx.emit("scale", [old], {"factor": 1.0 - float(momentum)}, stats, suffix=f"{name}.kept")
            new = cx.emit("scale", [stat], {"factor": float(momentum)}, stats, suffix=f"{name}.new")
            cx.updates(cx.emit("add", [kept, new], {}, stats, suffix=f"{name}.updated"), old)
        tracked = kwargs.get("num_batches_tracked")  # nn.BatchNorm's step count (F.batch_norm has none)
        if isinstance(tracked, torch.Tensor) and tracked.dim() == 0:
            old = cx.state_buffer(tracked)
            one = cx.constant(torch.tensor(1, dtype=tracked.dtype))
            cx.updates(cx.emit("add", [old, one], {}, Meta([], tracked.dtype), suffix="num_batches_tracked.updated"),
                       old)
    return out


def _floor_sized(shape, kernel, stride, padding, value):
    """Whether a ceil-mode pooling's output has the floor mode's size: then no window hangs past the input
    and the two are the same pooling (HGNetV2's stride-1 max pool)."""
    stride = kernel if stride is None or (isinstance(stride, (list, tuple)) and not stride) else stride
    floor = [(size + 2 * p - k) // s + 1 for size, k, s, p in zip(shape[-2:], _pair(kernel), _pair(stride),
                                                                   _pair(padding))]
    return floor == [int(v) for v in value.shape[-2:]]


def _pool2d(type_):
    def handler(cx, args, kwargs, value):
        x, kernel = args[0], _arg(args, kwargs, 1, "kernel_size")
        stride, padding = _arg(args, kwargs, 2, "stride"), _arg(args, kwargs, 3, "padding", 0)
        if cx.rank(x) != 4 or isinstance(value, tuple):
            return None  # unbatched, or max pooling that returns its indices
        if type_ == "max_pool2d":
            dilation, ceil_mode = _arg(args, kwargs, 4, "dilation", 1), _arg(args, kwargs, 5, "ceil_mode", False)
            if _pair(dilation) != [1, 1] or (ceil_mode and not _floor_sized(cx.shape(x), kernel, stride, padding,
                                                                             value)):
                return None
        else:
            ceil_mode = _arg(args, kwargs, 4, "ceil_mode", False)
            include_pad = _arg(args, kwargs, 5, "count_include_pad", True)
            if kwargs.get("divisor_override") is not None:
                return None
            if ceil_mode or (not include_pad and _pair(padding) != [0, 0]):
                return _avg_pool2d_counted(cx, x, kernel, stride, padding, ceil_mode, include_pad, value)
        attrs = {"kernel": _pair(kernel), "padding": _pair(padding)}
        if stride is not None and (not isinstance(stride, (list, tuple)) or len(stride) > 0):
            attrs["stride"] = _pair(stride)
        return cx.emit(type_, [x], attrs, value)
    return handler


def _avg_pool2d_counted(cx, x, kernel, stride, padding, ceil_mode, include_pad, value):
    """Average pooling whose divisor is not the window's area (count_include_pad=False: PoolFormer; ceil_mode:
    EfficientNet): zeros padded after the input so that floor-mode windows reach as far as ceil mode's, the
    engine's avg_pool2d (a window's sum / area), then a constant factor per output position, area / torch's
    divisor, computed here by pooling ones both ways (0 where a window holds no input)."""
    kernel, padding = _pair(kernel), _pair(padding)
    stride = _pair(stride) if stride is not None and (not isinstance(stride, (list, tuple)) or stride) else kernel
    n, c, h, w = cx.shape(x)
    oh, ow = value.shape[-2:]
    extra = [max(0, (o - 1) * s + k - 2 * p - size)
             for o, s, k, p, size in zip((oh, ow), stride, kernel, padding, (h, w))]
    dtype = cx.torch_dtype(x)
    current = x
    if any(extra):
        current = cx.emit("pad", [x], {"pads": [0, extra[1], 0, extra[0]]},
                          Meta([n, c, h + extra[0], w + extra[1]], dtype), suffix="reach")
    pooled = cx.emit("avg_pool2d", [current], {"kernel": kernel, "padding": padding, "stride": stride},
                     Meta(value.shape, dtype), suffix="sum_over_area")
    ones = torch.ones(1, 1, h, w, dtype=torch.float64)
    wanted = F.avg_pool2d(ones, kernel, stride, padding, ceil_mode=ceil_mode, count_include_pad=include_pad)
    engine = F.avg_pool2d(F.pad(ones, [0, extra[1], 0, extra[0]]), kernel, stride, padding, count_include_pad=True)
    if tuple(wanted.shape[-2:]) != (oh, ow) or wanted.shape != engine.shape:
        return None
    factor = torch.where(engine > 0, wanted / engine.clamp_min(1e-30), torch.zeros_like(engine)).to(dtype)
    return cx.emit("mul", [pooled, cx.constant(factor)], {}, value)


def _adaptive_avg_pool2d(cx, args, kwargs, value):
    x = args[0]
    if cx.rank(x) != 4:
        return None
    return cx.emit("adaptive_avg_pool2d", [x], {"output_size": [int(s) for s in value.shape[-2:]]}, value)
