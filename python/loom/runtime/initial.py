"""Initial values of loaded tensors, the same numbers `loom verify` draws (src/verify/graph_interpreter.cc):
a counter-based generator keyed by (seed, tensor name, element index), so every rank slices its piece of
one single-device value and a plan of any shape starts where the single device does.

    floating tensors   scale * (2u - 1), u uniform in [0, 1)        (scale 0.5)
    integer tensors    min(bound - 1, floor(u * bound))             (bound from the manifest: the vocabulary)
    optimizer states   zeros, or a copy of the parameter (fp32 master weights)
    constant buffers   the program's own numbers (manifest "value": a traced model's position ids, constants)
    derived inputs     computed from the whole value of another input (counted_tokens: src/ir/derived_input.h)

Several steps (launch --steps): step 0 draws exactly the numbers above; step k > 0 draws each input (role
"input": the batch) under the key "<name>@<k>", so every step sees a new batch, the same on every plan.
"""

import numpy as np
import torch

MASK = (1 << 64) - 1
DTYPES = {
    "f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
    "i64": torch.int64, "i32": torch.int32, "i8": torch.int8, "u8": torch.uint8, "bool": torch.bool,
}


def _mix_int(z):
    z = (z + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def _mix_array(z):
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def hash_name(name):
    """FNV-1a over the name's bytes: the name, not an id, keys a tensor's values."""
    h = 0xCBF29CE484222325
    for byte in name.encode():
        h = ((h ^ byte) * 0x100000001B3) & MASK
    return h


def uniform(seed, name, count):
    """count uniforms in [0, 1) for elements 0..count-1 of the tensor keyed by (seed, name)."""
    key = np.uint64(_mix_int((seed ^ hash_name(name)) & MASK))
    z = _mix_array(key ^ _mix_array(np.arange(count, dtype=np.uint64)))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def mix_array(z):
    """The generator's mixing function over uint64 arrays (dropout masks use it too)."""
    return _mix_array(z)


def mix_int(z):
    return _mix_int(z & MASK)


def draw_key(name, entry, step):
    """The generator's key of a loaded tensor at a step: inputs (the batch) change per step, the rest do not."""
    return f"{name}@{step}" if step and entry.get("role") == "input" else name


def initial_value(name, entry, seed, tensors, scale=0.5, step=0):
    """The whole single-device value of a loaded tensor (a float64 or int64 tensor before the cast); step > 0
    draws the step's batch for an input."""
    key = draw_key(name, entry, step)
    shape = tuple(entry["shape"])
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    init = entry["init"]
    if init == "zeros":
        values = np.zeros(count)
    elif init == "copy":
        source = entry["copy_of"]
        return initial_value(source, tensors[source], seed, tensors, scale)
    elif init == "constant":
        values = np.array([float(v) for v in entry["value"]], dtype=np.float64)
        if entry["dtype"] not in ("f64", "f32", "f16", "bf16"):
            values = values.astype(np.int64)
    elif init == "uniform":
        values = scale * (2 * uniform(seed, key, count) - 1)
    elif init == "integer":
        bound = int(entry["bound"])
        values = np.minimum(bound - 1, np.floor(uniform(seed, key, count) * bound)).astype(np.int64)
    else:
        raise ValueError(f"tensor '{name}': unknown init '{init}' in the manifest")
    return torch.from_numpy(np.ascontiguousarray(values)).reshape(shape)


def counted_tokens(labels, derived):
    """A loss's counted tokens (manifest "derived", src/ir/derived_input.h): the elements of the whole labels
    inside the window (trim: [front, back] per dim) that are not ignore_index, as a float64 scalar."""
    window = labels
    for dim, (front, back) in enumerate(derived.get("trim", ())):
        window = window.narrow(dim, front, labels.shape[dim] - front - back)
    return (window != int(derived["ignore_index"])).sum().to(torch.float64)


def module_state(module, manifest):
    """{manifest tensor name: whole value} of a torch module's parameters, for Runtime(initial=...): traced
    parameters keep the module's qualified names; a fused projection's parts are a view of the module's
    parameter (same elements, same order) reshaped to the manifest's shape. Errors name a parameter the
    plan loads that the module lacks, or one whose element count differs."""
    tensors = manifest["tensors"]
    own = dict(module.named_parameters())
    state = {}
    for name, entry in tensors.items():
        if entry.get("role") != "parameter" or "updates" in entry:
            continue  # an updated version is the step's result, not a load
        p = own.get(name)
        if p is None:
            raise ValueError(f"the plan loads parameter '{name}', which {type(module).__name__} does not have "
                             f"(was the plan traced from another model?)")
        shape = tuple(entry["shape"])
        if p.numel() != int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"parameter '{name}': the module's {tuple(p.shape)} does not hold the plan's {shape}")
        state[name] = p.detach().reshape(shape).clone()
    return state
