"""The tables of docs/coverage.md from a coverage run's rows: `python -m loom.coverage --match --json out.json`,
then `python -m loom.coverage_markdown out.json` prints the per-family shares, the summary line and the table of
the classes that do not count (the prose around them is written by hand)."""

import json
import sys

from .coverage import FAMILIES


def _share(count, total):
    return f"{count} ({100.0 * count / total:.0f} %)" if total else "0"


def _family_line(name, rows):
    built = [r for r in rows if r["built"]]
    traced = sum(1 for r in built if r["traced"])
    planned = sum(1 for r in built if r["traced"] and r["dp"] and r["tp"])
    matched = sum(1 for r in built if r.get("match"))
    n = len(built)
    return f"| {name} | {len(rows)} | {n} | {_share(traced, n)} | {_share(planned, n)} | {_share(matched, n)} |"


def _stage(row):
    if not row["built"]:
        return "build"
    if not row["traced"]:
        return "trace"
    return "plan" if not (row["dp"] and row["tp"]) else "match"


def tables(report):
    """The markdown of docs/coverage.md's tables for a `--json` report ({rows, summary})."""
    rows = report["rows"]
    lines = ["| family | classes | build | trace | trace + plan dp and tp | + match 1 device |",
             "|---|---|---|---|---|---|"]
    lines += [_family_line(family, [r for r in rows if r["family"] == family]) for family in FAMILIES]
    lines += [_family_line("**all**", rows), "", report["summary"]["text"], "",
              "| family | class | stops at | reason |", "|---|---|---|---|"]
    for r in rows:
        if not r.get("match"):
            reason = r["reason"].replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {r['family']} | {r['model']} | {_stage(r)} | {reason} |")
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m loom.coverage_markdown REPORT.json (from `python -m loom.coverage --json`)",
              file=sys.stderr)
        return 2
    with open(argv[0]) as report:
        print(tables(json.load(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
