"""padding (src/ops/padding.cc): constant padding."""

import torch.nn.functional as F


def _pad(attrs, inputs, outputs):
    pads, value = [int(p) for p in attrs["pads"]], float(attrs.get("value", 0.0))
    return lambda x: (F.pad(x, pads, mode="constant", value=value),)


FORWARD = {"pad": _pad}
