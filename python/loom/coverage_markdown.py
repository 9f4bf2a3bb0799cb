"""The tables of docs/coverage.md from a coverage run's rows: `python -m loom.coverage --match --json out.json`,
then `python -m loom.coverage_markdown out.json [more.json ...]` prints the per-family shares, the summary line
and the table of the classes that do not count (the prose around them is written by hand). A run made in parts
(`--family`, `--classes`) gives several files: their rows are merged, a later file's row replacing an earlier
one of the same class (not where it stopped at the time limit and the earlier got further), and `--json PATH`
writes the merged report. A file not ending in .json is read as a run's progress lines (its stderr), for a part
cut short before it wrote its report."""

import json
import re
import sys

from .coverage import FAMILIES, FLOAT32, summary


def _share(count, total):
    return f"{count} ({100.0 * count / total:.0f} %)" if total else "0"


def _family_line(name, rows):
    built = [r for r in rows if r["built"]]
    traced = sum(1 for r in built if r["traced"])
    planned = sum(1 for r in built if r["traced"] and r["dp"] and r["tp"])
    matched = sum(1 for r in built if r.get("match"))
    checked = sum(1 for r in built if r.get("match") is not None)
    n = len(built)
    match = _share(matched, n) + (f" of {checked} checked" if checked != planned else "")
    match = match if checked else "not checked"
    return f"| {name} | {len(rows)} | {n} | {_share(traced, n)} | {_share(planned, n)} | {match} |"


def _stage(row):
    if not row["built"]:
        return "build"
    if not row["traced"]:
        return "trace"
    return "plan" if not (row["dp"] and row["tp"]) else "match"


def _causes(row):
    """The causes one failing row counts towards: each unsupported op it lists, else its reason's head (the error's
    type; for the engine's refusals, the plan and the message's last clause)."""
    reason = row["reason"]
    if reason.startswith("unsupported: "):
        return [op.strip() for op in reason[len("unsupported: "):].split(", ")]
    if reason.startswith(("plan ", "emit ", "run ")):
        return [reason.split(":")[0] + ": " + reason.split(": ")[-1][:70]]
    return [reason.split(":")[0]]


def top_causes(rows, count=15):
    """Markdown: the causes that stop the most classes (an unsupported op counts once per class that lists it)."""
    tally = {}
    for row in rows:
        if row.get("match") is False or not (row["built"] and row["traced"] and row["dp"] and row["tp"]):
            if row["built"]:
                for cause in _causes(row):
                    tally.setdefault(cause, []).append(row["model"])
    lines = ["| classes | cause | e.g. |", "|---|---|---|"]
    for cause, models in sorted(tally.items(), key=lambda item: (-len(item[1]), item[0]))[:count]:
        lines.append(f"| {len(models)} | {cause.replace('|', chr(92) + '|')} | {', '.join(models[:3])} |")
    return "\n".join(lines)


def tables(report):
    """The markdown of docs/coverage.md's tables for a `--json` report ({rows, summary})."""
    rows = report["rows"]
    lines = ["| family | classes | build | trace | trace + plan dp and tp | + match 1 device |",
             "|---|---|---|---|---|---|"]
    lines += [_family_line(family, [r for r in rows if r["family"] == family]) for family in FAMILIES
              if any(r["family"] == family for r in rows)]
    lines += [_family_line("**all**", rows), "", report["summary"]["text"], "", "Causes that stop the most classes "
              "(classes that build):", "", top_causes(rows), "",
              "| family | class | stops at | reason |", "|---|---|---|---|"]
    for r in rows:  # what fails; a class that plans and was not trained (--match not asked) is not listed
        if r.get("match") is False or not (r["built"] and r["traced"] and r["dp"] and r["tp"]):
            reason = r["reason"].replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {r['family']} | {r['model']} | {_stage(r)} | {reason} |")
    return "\n".join(lines)


def _stages_passed(row):
    return sum(bool(row.get(k)) for k in ("built", "traced", "dp", "tp", "match"))


def _timed_out(row):
    return "took longer than" in row["reason"]


def merged(reports):
    """One report of several parts' ({rows, summary}): rows in first-seen order, a later part's row replacing an
    earlier one of the same (family, class), except a row that stopped at the time limit (a busy box's verdict,
    not the class's) where the earlier row got further; the summary recomputed over the merged rows."""
    rows = {}
    for report in reports:
        for row in report["rows"]:
            key = (row["family"], row["model"])
            if key in rows and _timed_out(row) and _stages_passed(rows[key]) > _stages_passed(row):
                continue
            rows[key] = row
    rows = list(rows.values())
    return {"rows": rows, "summary": summary(rows)}


_PROGRESS = re.compile(r"^(\S+)\s+(\S+)\s+traced (True|False)\s+dp (True|False)\s+tp (True|False)\s+"
                       r"match (True|False|None)\s?(.*)$")


def from_progress(text):
    """A report ({rows, summary}) from the per-class progress lines a run prints on stderr: a part cut short
    (the deadline, a relinked engine) still counts the classes it reached. Other lines (warnings) are skipped."""
    rows = []
    for line in text.splitlines():
        m = _PROGRESS.match(line.rstrip("\n"))
        if not m or m.group(1) not in FAMILIES:
            continue
        family, model, traced, dp, tp, match, reason = m.groups()
        reason, _, float32 = reason.strip().partition(FLOAT32.strip())
        flag = {"True": True, "False": False, "None": None}
        row = {"family": family, "model": model, "built": not reason.startswith("does not build: "),
               "traced": flag[traced], "dp": flag[dp], "tp": flag[tp], "match": flag[match], "reason": reason.strip()}
        if row["reason"] == "float64" or row["reason"].startswith("float64 "):  # compared in float64
            row.update(reason=row["reason"][len("float64"):].strip(), float64=True, float32=float32.strip())
        if row["reason"] == "own_init" or row["reason"].startswith("own_init "):  # from the model's parameters
            row.update(reason=row["reason"][len("own_init"):].strip(), own_init=True)
        rows.append(row)
    return {"rows": rows, "summary": summary(rows)}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    out = None
    if "--json" in argv:
        at = argv.index("--json")
        out = argv[at + 1] if at + 1 < len(argv) else None
        del argv[at:at + 2]
        if out is None:
            argv = []
    if not argv:
        print("usage: python -m loom.coverage_markdown REPORT.json [MORE.json | PROGRESS.err ...] [--json MERGED.json] "
              "(reports from `python -m loom.coverage --json`, or a run's stderr)", file=sys.stderr)
        return 2
    reports = []
    for path in argv:  # a run's --json report, or its progress lines (stderr) where it was cut short
        with open(path) as report:
            reports.append(json.load(report) if path.endswith(".json") else from_progress(report.read()))
    report = merged(reports) if len(reports) > 1 else reports[0]
    if out:
        with open(out, "w") as merged_file:
            json.dump(report, merged_file, indent=1)
    print(tables(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
