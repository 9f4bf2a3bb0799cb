"""loss (src/ops/loss.cc, cross_entropy_parts.cc): cross entropy, NLL and MSE, and cross entropy in
vocabulary-splittable parts (the shift is detached). Placed: a class shard starts at its offset, smoothing
divides by the whole vocabulary, and a shard of the batch divides by the whole count, so the shards' losses
add up to the whole's mean."""

import numpy as np
import torch
import torch.nn.functional as F

from .common import offset


def _cross_entropy(attrs, inputs, outputs):
    ignore = int(attrs.get("ignore_index", -100))
    smoothing = float(attrs.get("label_smoothing", 0.0))
    return lambda logits, labels: (
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=ignore,
                        label_smoothing=smoothing).float(),)


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
        return ((per_token * valid).sum() / valid.sum().clamp(min=1)).float(),

    return run


def _nll_loss(attrs, inputs, outputs):
    ignore = int(attrs.get("ignore_index", -100))
    return lambda logp, labels: (
        F.nll_loss(logp.reshape(-1, logp.shape[-1]), labels.reshape(-1), ignore_index=ignore).float(),)


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
    labels_spec = inputs[3]
    token_shard = list(labels_spec["full"]) != list(labels_spec["shape"])
    whole_tokens = float(np.prod(labels_spec["full"])) if token_shard else None

    def run(sums, shift, target, labels):
        counted = labels != ignore
        safe = torch.where(counted, sums.float(), torch.ones_like(sums, dtype=torch.float32))
        per_token = torch.log(safe) + shift.detach().float() - target.float()
        total = torch.where(counted, per_token, torch.zeros_like(per_token)).sum()
        divisor = whole_tokens if token_shard else counted.sum().clamp(min=1).float()
        return ((total / divisor).float(),)

    return run


def _loss_divisor(spec, counted):
    """A shard of the batch divides by the whole tensor's element count, so the shards' losses add up to the
    whole's mean (exact when no token is ignored); the whole divides by its counted tokens."""
    if list(spec["full"]) != list(spec["shape"]):
        return float(np.prod(spec["full"]))
    return counted.sum().clamp(min=1).float()


def _placed_classification_loss(log_probs_given):
    def build(attrs, inputs, outputs):
        ignore = int(attrs.get("ignore_index", -100))
        smoothing = float(attrs.get("label_smoothing", 0.0))

        def run(scores, labels):
            flat, flat_labels = scores.reshape(-1, scores.shape[-1]), labels.reshape(-1)
            if log_probs_given:
                total = F.nll_loss(flat, flat_labels, ignore_index=ignore, reduction="sum")
            else:
                total = F.cross_entropy(flat, flat_labels, ignore_index=ignore, label_smoothing=smoothing,
                                        reduction="sum")
            return ((total / _loss_divisor(inputs[1], labels != ignore)).float(),)

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
