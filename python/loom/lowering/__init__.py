"""From torch.fx nodes to the engine's registry ops (`loom ops` lists them; src/ops/*.cc their attributes).

One file per family of handlers (compute, shapes, modules, moe), the tables that index them (tables)
and what they share (base). A handler receives a Lowering context, the node's arguments with tensors replaced by engine tensor ids
(class T) and its concrete output value, and returns the lowered value: a T, a tuple of them, or None
when the node is not supported (it is then reported). Shapes are never computed here: every output
takes the recorded value's shape and the engine checks it against its own rules.
"""

from .aten import ATEN
from .base import Meta, T
from .modules import MODULES
from .moe import is_dense_moe, moe_handler
from .tables import FUNCTIONS, METHODS

__all__ = ["ATEN", "FUNCTIONS", "METHODS", "MODULES", "Meta", "T", "is_dense_moe", "module_handler"]


def module_handler(module):
    """The handler of a module call: a dense mixture-of-experts block, else the first MODULES type it is."""
    if is_dense_moe(module):
        return moe_handler(module)
    for type_, handler in MODULES:
        if isinstance(module, type_):
            return handler
    return None
