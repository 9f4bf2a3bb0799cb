"""optimizer (src/ops/optimizer.cc): Adam, AdamW and SGD steps, in place. Inputs: param, grad, [fp32 master],
states. With master weights the update runs on the master copy (the 16-bit gradient cast to fp32 first) and
the result is copied back into the 16-bit parameter, as mixed-precision training does. Adam-style steps use
torch's fused kernel where the build has one (the runtime also batches them: compute.flush_adam)."""

import torch


def adam_hyperparameters(op_type, attrs):
    """(lr, beta1, beta2, eps, weight_decay) of an adam / adamw op, with the op's defaults."""
    decoupled = op_type == "adamw"
    return (float(attrs.get("lr", 1e-3)), float(attrs.get("beta1", 0.9)), float(attrs.get("beta2", 0.999)),
            float(attrs.get("eps", 1e-8)), float(attrs.get("weight_decay", 1e-2 if decoupled else 0.0)))


def adam_step(p, g, m, v, lr, beta1, beta2, eps, decay, decoupled, step=1):
    """Step `step` of torch.optim.Adam(W) (foreach=False), in place."""
    if decoupled:
        p.mul_(1 - lr * decay)
    elif decay:
        g = g + decay * p
    m.lerp_(g, 1 - beta1)
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    denom = (v / (1 - beta2 ** step)).sqrt_().add_(eps)
    p.addcdiv_(m, denom, value=-lr / (1 - beta1 ** step))


def _adam_builder(op_type):
    decoupled = op_type == "adamw"

    def build(attrs, inputs, outputs):
        master = bool(attrs.get("master_weights", False))
        lr, beta1, beta2, eps, decay = adam_hyperparameters(op_type, attrs)
        fused = torch._fused_adamw_ if decoupled else torch._fused_adam_
        step = int(attrs.get("step", 1))  # the optimizer's step number (the runtime counts steps)
        steps = {}

        def run(param, grad, *rest):
            weights = rest[0] if master else param
            m, v = rest[-2], rest[-1]
            g = grad.to(weights.dtype) if grad.dtype != weights.dtype else grad
            if weights.device not in steps:
                steps[weights.device] = torch.full((), float(step), dtype=torch.float32, device=weights.device)
            try:
                fused([weights], [g], [m], [v], [], [steps[weights.device]], lr=lr, beta1=beta1, beta2=beta2,
                      weight_decay=decay, eps=eps, amsgrad=False, maximize=False)
            except (RuntimeError, NotImplementedError):
                adam_step(weights, g, m, v, lr, beta1, beta2, eps, decay, decoupled, step)
            if master:
                param.copy_(weights)
            return (param, *rest)

        return run

    return build


def _sgd(attrs, inputs, outputs):
    master = bool(attrs.get("master_weights", False))
    lr = float(attrs.get("lr", 1e-3))
    decay = float(attrs.get("weight_decay", 0.0))
    momentum = float(attrs.get("momentum", 0.0))

    def run(param, grad, *rest):
        weights = rest[0] if master else param
        g = grad.to(weights.dtype)
        if decay:
            g = g + decay * weights
        if momentum > 0:
            buf = rest[-1]
            buf.mul_(momentum).add_(g)
            g = buf
        weights.add_(g, alpha=-lr)
        if master:
            param.copy_(weights)
        return (param, *rest)

    return run


FORWARD = {"adam": _adam_builder("adam"), "adamw": _adam_builder("adamw"), "sgd": _sgd}
NOT_DIFFERENTIABLE = {"adam", "adamw", "sgd"}
