"""loss (src/ops/loss.cc, cross_entropy_parts.cc): cross entropy, NLL and MSE, and cross entropy in
vocabulary-splittable parts (the shift is detached). The classification losses sum the counted tokens (label not
ignore_index) and divide by one whole-batch number: the counted tokens given as a third input (a derived input,
so the loss is torch's mean over counted tokens), else the labels' whole element count. Placed: a class shard
starts at its offset, smoothing divides by the whole vocabulary, and a shard of the batch divides by the same
whole-batch number, so the shards' losses add up exactly."""

import numpy as np
import torch
import torch.nn.functional as F

from .common import offset


def _over(total, count, whole):
    """The counted tokens' sum over the whole-batch divisor: the count given, else the whole element count."""
    return ((total / count.float()) if count is not None else (total / whole)).float()


def _cross_entropy(attrs, inputs, outputs):
    ignore = int(attrs.get("ignore_index", -100))
    smoothing = float(attrs.get("label_smoothing", 0.0))
    return lambda logits, labels, count=None: (_over(
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=ignore,
                        label_smoothing=smoothing, reduction="sum"), count, labels.numel()),)


def _target(x, labels, ignore, smoothing):
    valid = labels != ignore
    z = x.gather(-1, torch.where(valid, labels, 0).unsqueeze(-1)).squeeze(-1)
    if smoothing:
        z = (1 - smoothing) * z + smoothing * x.mean(-1)
    return torch.where(valid, z, torch.zeros_like(z))


def _target_logit(attrs, inputs, outputs):
    ignore = int(attrs.get("ignore_index", -100))
    smoothing = float(attrs.get("label_smoothing", 0.0))
    return lambda logits, labels: (_target(logits.float(), labels, ignore, smoothing),)


def _cross_entropy_parts(attrs, inputs, outputs):
    ignore = int(attrs.get("ignore_index", -100))
    smoothing = float(attrs.get("label_smoothing", 0.0))

    def run(logits, labels, shift):
        x = logits.float()
        return (torch.exp(x - shift.detach().unsqueeze(-1)).sum(-1), _target(x, labels, ignore, smoothing))

    return run


def _cross_entropy_from_parts(attrs, inputs, outputs):
    ignore = int(attrs.get("ignore_index", -100))

    def run(sums, shift, target, labels):
        valid = (labels != ignore).float()
        per_token = torch.log(sums.float()) + shift.detach().float() - target.float()
        return ((per_token * valid).sum() / labels.numel()).float(),

    return run


def _nll_loss(attrs, inputs, outputs):
    ignore = int(attrs.get("ignore_index", -100))
    return lambda logp, labels, count=None: (_over(
        F.nll_loss(logp.reshape(-1, logp.shape[-1]), labels.reshape(-1), ignore_index=ignore, reduction="sum"),
        count, labels.numel()),)


def _mse_loss(attrs, inputs, outputs):
    return lambda pred, target: (F.mse_loss(pred, target).float(),)


# --- placed -------------------------------------------------------------------------------------------


def _class_shard(attrs, logits_spec):
    first = offset(logits_spec)[-1]
    vocabulary = logits_spec["full"][-1]
    ignore = int(attrs.get("ignore_index", -100))
    smoothing = float(attrs.get("label_smoothing", 0.0))

    def target(x, labels):
        width = x.shape[-1]
        local = labels - first
        hit = (labels != ignore) & (local >= 0) & (local < width)
        z = x.gather(-1, torch.where(hit, local, torch.zeros_like(local)).unsqueeze(-1)).squeeze(-1)
        z = torch.where(hit, z, torch.zeros_like(z)) * (1 - smoothing)
        if smoothing:
            z = z + (smoothing / vocabulary) * x.sum(-1)
        return torch.where(labels != ignore, z, torch.zeros_like(z))

    return target, ignore


def _placed_target_logit(attrs, inputs, outputs):
    target, _ = _class_shard(attrs, inputs[0])
    return lambda logits, labels: (target(logits.float(), labels),)


def _placed_cross_entropy_parts(attrs, inputs, outputs):
    target, ignore = _class_shard(attrs, inputs[0])

    def run(logits, labels, shift):
        x = logits.float()
        sums = torch.exp(x - shift.detach().float().unsqueeze(-1)).sum(-1)
        return (torch.where(labels != ignore, sums, torch.zeros_like(sums)), target(x, labels))

    return run


def _placed_cross_entropy_from_parts(attrs, inputs, outputs):
    ignore = int(attrs.get("ignore_index", -100))
    whole_tokens = _whole_count(inputs[3])

    def run(sums, shift, target, labels):
        counted = labels != ignore
        safe = torch.where(counted, sums.float(), torch.ones_like(sums, dtype=torch.float32))
        per_token = torch.log(safe) + shift.detach().float() - target.float()
        total = torch.where(counted, per_token, torch.zeros_like(per_token)).sum()
        return ((total / whole_tokens).float(),)

    return run


def _whole_count(spec):
    """The whole labels' element count (np.prod of () is 1): a piece divides by it as the whole does."""
    return float(np.prod(spec["full"]))


def _placed_classification_loss(log_probs_given):
    def build(attrs, inputs, outputs):
        ignore = int(attrs.get("ignore_index", -100))
        smoothing = float(attrs.get("label_smoothing", 0.0))

        whole = _whole_count(inputs[1])

        def run(scores, labels, count=None):
            flat, flat_labels = scores.reshape(-1, scores.shape[-1]), labels.reshape(-1)
            if log_probs_given:
                total = F.nll_loss(flat, flat_labels, ignore_index=ignore, reduction="sum")
            else:
                total = F.cross_entropy(flat, flat_labels, ignore_index=ignore, label_smoothing=smoothing,
                                        reduction="sum")
            return (_over(total, count, whole),)

        return run

    return build


def _placed_mse_loss(attrs, inputs, outputs):
    whole = float(np.prod(inputs[0]["full"])) if inputs[0]["full"] else 1.0
    return lambda pred, target: ((F.mse_loss(pred, target, reduction="sum") / whole).float(),)


FORWARD = {"cross_entropy": _cross_entropy, "target_logit": _target_logit, "cross_entropy_parts": _cross_entropy_parts,
           "cross_entropy_from_parts": _cross_entropy_from_parts, "nll_loss": _nll_loss, "mse_loss": _mse_loss}
# The labels index the scores' last dimension (the classes).
INDEX_INPUTS = {name: {1: (0, -1)} for name in ("cross_entropy", "target_logit", "cross_entropy_parts", "nll_loss")}
POSITIVE_INPUTS = {"cross_entropy_from_parts"}
PLACED = {"target_logit": _placed_target_logit, "cross_entropy_parts": _placed_cross_entropy_parts,
          "cross_entropy_from_parts": _placed_cross_entropy_from_parts,
          "cross_entropy": _placed_classification_loss(False), "nll_loss": _placed_classification_loss(True),
          "mse_loss": _placed_mse_loss}
