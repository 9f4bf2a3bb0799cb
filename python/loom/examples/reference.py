"""torch's own training of a module, the reference the examples and tests put Loom's losses beside."""


def torch_adamw_losses(model, batches, optimizer):
    """Trains `model` in place, one torch.optim.AdamW step (hyperparameters `optimizer`: lr, betas, eps,
    weight_decay) per batch (keyword arguments of the module, which returns `.loss`); the loss of each step."""
    import torch

    adamw = torch.optim.AdamW(model.parameters(), **optimizer)
    losses = []
    for batch in batches:
        adamw.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        adamw.step()
        losses.append(loss.item())
    return losses
