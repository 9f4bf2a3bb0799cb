"""Loom's runtime: executes the per-rank programs that `loom plan ... --emit DIR` generates from an
ExecPlan (docs/codegen.md), under torch.distributed (gloo on CPU; NCCL with cuda tensors).

    python -m loom.runtime.launch DIR [--steps N]   # one process per rank, N steps, results in DIR/results
"""
