"""The op forms `loom profile` times: shared with the runtime, which runs generated rank programs with them
(python/loom/runtime/forms/ holds the forms, one module per registry op family; this module names them for
the timer)."""

from loom.runtime.forms import (  # noqa: F401  (re-exported for runner.py and the timer's users)
    FORWARD,
    INDEX_INPUTS,
    NOT_DIFFERENTIABLE,
    POSITIVE_INPUTS,
    UNSUPPORTED_REASONS,
    Unsupported,
    as_tuple,
    attr_value,
    build,
    index_bounds,
    positive_inputs,
)
