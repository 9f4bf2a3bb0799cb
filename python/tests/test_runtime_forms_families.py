"""The runtime's op forms are grouped as the engine's registry groups its ops (DESIGN.md, "Capture (Python)":
one place per family): every op type `loom ops` lists has its forms in the module of its family, and every
table of a family module speaks of that family's op types only."""

from loom.runtime import forms

TABLES = ("PLACED", "BACKWARD", "FROM_OUTPUT", "INDEX_INPUTS", "POSITIVE_INPUTS", "NOT_DIFFERENTIABLE")


def registry_families(run_loom):
    """{op type: family} as `loom ops` prints them (a header line, one line per type, a count line)."""
    result = run_loom("ops")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:2] == ["family", "type"] and lines[-1].endswith("operator types")
    return {line.split()[1]: line.split()[0] for line in lines[1:-1]}


def test_every_registry_op_has_its_forms_in_its_familys_module(run_loom):
    registry = registry_families(run_loom)
    assert forms.FAMILY == registry
    assert sorted(forms.FAMILIES) == sorted(set(registry.values()))
    for family, module in forms.FAMILIES.items():
        assert module.__name__ == f"loom.runtime.forms.{family}"


def test_a_family_modules_tables_name_only_its_own_op_types():
    for family, module in forms.FAMILIES.items():
        own = set(getattr(module, "FORWARD", {}))
        for table in TABLES:
            strangers = set(getattr(module, table, ())) - own
            assert not strangers, f"{family}.{table} names op types without a forward form there: {strangers}"
    assert not set(forms.FORWARD) & set(forms.UNSUPPORTED_REASONS)
