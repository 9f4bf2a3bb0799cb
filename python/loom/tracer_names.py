"""How the tracer names what it reports: a torch target as the user wrote it (torch.fft.fft, not
torch._C._fft.fft_fft), the module path an op was called from, and the one error listing every op it could
not lower."""

import torch

_HINT = ('register the function that holds such ops with loom.register_op(fn, "annotation") (docs/custom_ops.md): '
         'the tracer then keeps its calls whole; or rewrite them with supported torch ops')


class UnsupportedOpsError(RuntimeError):
    """Every torch target the tracer cannot map, with where it occurs and how often."""

    def __init__(self, unsupported):
        self.unsupported = unsupported  # OrderedDict: target -> {"where": [node or module paths], "count": n}
        lines = [f"{len(unsupported)} unsupported op(s) in the traced model:"]
        for target, info in unsupported.items():
            where = ", ".join(info["where"][:3]) + (", ..." if len(info["where"]) > 3 else "")
            lines.append(f"  {target}: {info['count']} use(s), at {where}")
        lines.append(f"hint: {_HINT}")
        super().__init__("\n".join(lines))



class _Unsupported(Exception):
    """An operand or dtype a handler cannot take: its op is reported unsupported, with this reason."""


_PUBLIC_NAMES = None


def _public_name(target):
    """torch.fft.fft rather than torch._C._fft.fft_fft: the name a user wrote, from torch's namespaces."""
    global _PUBLIC_NAMES
    if _PUBLIC_NAMES is None:
        _PUBLIC_NAMES = {}
        spaces = [("torch", torch), ("torch.nn.functional", torch.nn.functional)]
        spaces += [(f"torch.{name}", getattr(torch, name)) for name in ("fft", "linalg", "special")
                   if hasattr(torch, name)]
        for prefix, space in reversed(spaces):
            for name in dir(space):
                if not name.startswith("_"):
                    _PUBLIC_NAMES.setdefault(id(getattr(space, name)), f"{prefix}.{name}")
    return _PUBLIC_NAMES.get(id(target))


def _target_name(node):
    if isinstance(node.target, torch._ops.OpOverload):
        return str(node.target)  # aten.linear.default
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    target = node.target
    if target is getattr and len(node.args) == 2 and isinstance(node.args[1], str):
        return f"Tensor.{node.args[1]}"
    public = _public_name(target)
    if public:
        return public
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or str(target)
    return f"{module}.{name}" if module else name


def _scope(node):
    """The module path a function node was called from (torch.fx's nn_module_stack), or ''."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ""
    path = list(stack.values())[-1]
    path = path[0] if isinstance(path, tuple) else path
    return path if isinstance(path, str) else ""

