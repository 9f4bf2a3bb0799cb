"""Policies written in Python through the bindings (loom.policy; docs/python_api.md, "Policies in Python"):
the example megatron policy gives `loom plan --policy megatron`'s plan.json byte for byte (and its exec.json),
the example data-parallel policy's plan verifies against one device, the graph and primitives read as the
engine's, and a policy's mistakes come back as the engine's errors naming the op."""

import pytest

MODEL = dict(model="gpt3-125m", shrink=True, layers=2)

# (dp, tp, pp, micro-batches, further keywords and their flags): the acceptance's dp 2 x tp 2, pipelines (1F1B
# and GPipe), gradient accumulation, sequence parallelism and recomputation.
DEGREES = [(2, 2, 1, 1, {}), (1, 2, 2, 2, {}), (2, 2, 2, 2, {}), (2, 2, 1, 2, {}), (1, 4, 1, 1, {}),
           (2, 1, 2, 2, {"schedule": ("gpipe", "--schedule")}), (2, 2, 1, 1, {"sequence_parallel": (True, "--sp")}),
           (1, 2, 2, 2, {"recompute": ("full", "--recompute")})]


@pytest.fixture(scope="module")
def examples(engine):
    from loom.examples import policy_dp, policy_megatron

    return policy_megatron, policy_dp


def flags(dp, tp, pp, micro_batches, extra=None):
    out = ["--dp", str(dp), "--tp", str(tp), "--pp", str(pp), "--microbatches", str(micro_batches),
           "--gpus", str(dp * tp * pp)]
    for value, flag in (extra or {}).values():
        out += [flag] if value is True else [flag, str(value)]
    return out


@pytest.mark.parametrize("dp,tp,pp,micro_batches,extra", DEGREES)
def test_python_megatron_writes_the_builtin_plan(engine, examples, run_loom, tmp_path, dp, tp, pp, micro_batches,
                                                 extra):
    policy_megatron, _ = examples
    keywords = {key: value for key, (value, _) in extra.items()}
    result = engine.plan(**MODEL, dp=dp, tp=tp, pp=pp, micro_batches=micro_batches, gpus=dp * tp * pp,
                         policy=policy_megatron.megatron, **keywords)
    result.write_files(str(tmp_path / "py"))
    cli = run_loom("plan", "--model", "gpt3-125m", "--shrink", "--layers", "2", "--policy", "megatron",
                   *flags(dp, tp, pp, micro_batches, extra), "--out", str(tmp_path / "cc"))
    assert cli.returncode == 0, cli.stdout + cli.stderr
    for name in ("plan.json", "exec.json"):
        assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "cc" / name).read_bytes(), name
    assert result.description.startswith(f"python:megatron: dp {dp} x tp {tp} x pp {pp}")
    assert result.policy == "python:megatron" and result.devices == dp * tp * pp


@pytest.mark.parametrize("dp,tp,pp,micro_batches", [(2, 2, 1, 1), (1, 2, 2, 2)])
def test_python_megatron_plan_verifies(engine, examples, run_loom, dp, tp, pp, micro_batches):
    policy_megatron, _ = examples
    result = engine.plan(**MODEL, dtype="f32", dp=dp, tp=tp, pp=pp, micro_batches=micro_batches, gpus=dp * tp * pp,
                         policy=policy_megatron.megatron)
    assert result.verify()["worst"] <= 1e-9
    cli = run_loom("verify", "--model", "gpt3-125m", "--layers", "2", "--policy", "megatron",
                   *flags(dp, tp, pp, micro_batches))
    assert cli.returncode == 0 and "result     PASS" in cli.stdout, cli.stdout + cli.stderr


@pytest.mark.parametrize("gpus", [2, 4])
def test_python_data_parallel_verifies(engine, examples, tmp_path, gpus):
    _, policy_dp = examples
    result = engine.plan(**MODEL, gpus=gpus, policy=policy_dp.data_parallel)
    assert result.description == f"python:data_parallel: {gpus} GPUs"
    proof = result.verify()
    assert proof["worst"] <= 1e-9, proof
    # Every device computes: each holds a part of the batch-split forward ops.
    assert result.devices == gpus and all(b > 0 for b in result.peak_memory)


def test_plan_exposes_graph_and_primitives(engine):
    from loom.policy import Replicate, Split, batch_identifiers, tensor_parallel_layout

    seen = {}

    def inspect(plan, resource):
        ops = plan.ops
        wte = next(op for op in ops if op.name == "wte")
        assert wte.pass_ == "forward" and wte.type == "embedding" and "v+" in wte.annotation
        whole = plan.parts(wte.id)
        assert len(whole) == 1
        # The batch identifier is the annotation's name of the ids' dimension 0.
        assert batch_identifiers(plan)[wte.id] == plan.dim_identifier(whole[0], False, 0, 0)
        ids = plan.tensors[wte.inputs[0]]
        batch = ids.shape[0]
        halves = plan.trans(whole[0], Split(batch_identifiers(plan)[wte.id]), 2)
        assert plan.parts(wte.id) == halves
        boxes = [plan.sub_op(h).inputs[0].box[0] for h in halves]
        assert boxes == [(0, batch // 2, 1), (batch // 2, batch, 1)]
        assert not plan.sub_op(whole[0]).live
        # Its backward part followed: the mirror's parts are the halves' mirrors.
        backward = plan.sub_op(halves[0]).mirror
        assert backward >= 0 and plan.sub_op(backward).op != wte.id
        # A replicated op's copies read the same pieces.
        ln = next(op for op in ops if op.name == "ln_f")
        copies = plan.trans(plan.parts(ln.id)[0], Replicate(redundant_backward=True), 2)
        assert plan.sub_op(copies[0]).inputs[0].box == plan.sub_op(copies[1]).inputs[0].box
        layout = tensor_parallel_layout(plan, 2)
        fc1 = next(op for op in ops if op.name.endswith("mlp.fc1"))
        assert layout.splits[fc1.id] is not None
        seen["config"] = (resource.gpus, resource.config.dp, resource.config.tp, resource.config.pp)
        for op in ops:
            if not op.is_mirror:
                for device, part in enumerate(plan.parts(op.id)):
                    plan.assign(part, device % resource.gpus)
        plan.order(halves[0], halves[1])

    result = engine.plan(**MODEL, dp=2, gpus=2, policy=inspect)
    assert seen["config"] == (2, 2, 1, 1)
    assert result.verify()["worst"] <= 1e-9


def expect_error(engine, policy, *needles, **options):
    with pytest.raises(engine.PlanError) as caught:
        engine.plan(**MODEL, gpus=2, policy=policy, **options)
    for needle in needles:
        assert needle in str(caught.value), str(caught.value)


def test_unassigned_sub_op_names_it(engine):
    def forgets_the_last_op(plan, resource):
        for op in plan.ops[:-1]:
            if not op.is_mirror:
                plan.assign(plan.parts(op.id)[0], 0)

    expect_error(engine, forgets_the_last_op, "policy python:forgets_the_last_op", "ln_f.bias.adamw",
                 "is on no device", "hint: assign every part")


def test_unknown_identifier_names_the_op(engine):
    from loom.policy import Split

    def splits_nothing(plan, resource):
        op = next(op for op in plan.ops if op.name == "wte")
        plan.trans(plan.parts(op.id)[0], Split("zz"), 2)

    expect_error(engine, splits_nothing, "op 'wte' has no identifier 'zz'", "hint: split one of")


def test_dead_sub_op_and_kept_plan_are_refused(engine):
    from loom.policy import Replicate

    kept = []

    def reuses(plan, resource):
        kept.append(plan)
        whole = plan.parts(0)[0]
        plan.trans(whole, Replicate(), 2)
        plan.assign(whole, 0)

    expect_error(engine, reuses, "was transformed into parts")
    with pytest.raises(engine.PlanError, match="function that has returned"):
        kept[0].parts(0)


def test_policy_returns_nothing_and_never_folds(engine):
    expect_error(engine, lambda plan, resource: plan, "returned <loom Plan", "returns None")
    expect_error(engine, lambda plan, resource: None, "cannot be folded", fold="on")


def test_python_exception_passes_through(engine):
    def fails(plan, resource):
        raise KeyError("the policy's own error")

    with pytest.raises(KeyError, match="the policy's own error"):
        engine.plan(**MODEL, gpus=2, policy=fails)


def test_python_megatron_refuses_what_it_does_not_compose(engine, examples):
    policy_megatron, _ = examples
    for keywords, what in [({"zero": 1}, "ZeRO"), ({"coshard": 2}, "coshard"), ({"overlap": "oases"}, "overlap")]:
        with pytest.raises(ValueError, match=what):
            engine.plan(**MODEL, dp=2, tp=2, gpus=4, policy=policy_megatron.megatron, **keywords)
