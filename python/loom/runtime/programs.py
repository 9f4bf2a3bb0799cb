"""An emitted program's files, read and checked before any rank starts (docs/codegen.md, "The manifest"):
manifest.json's fields, and each rank_<r>.py against the sha256 the emitter wrote for it, so a program edited,
truncated or mixed with another plan's files is refused naming the file instead of running (a rank file cut at
a line boundary is still valid Python: it would run fewer collectives than its peers and hang them).

Also the rank programs' lines as the launcher names them in a failure: `where(...)` turns a line of
rank_<r>.py into the instruction it holds."""

import functools
import hashlib
import json
import pathlib
import re

from . import files
from .errors import LaunchError

FORMAT = 2
_HEX64 = re.compile(r"[0-9a-f]{64}")


def load_manifest(directory):
    """DIR/manifest.json, its fields checked (world size, rank files, checksums, groups, loads)."""
    path = pathlib.Path(directory) / "manifest.json"
    manifest = files.read_json_object(path, LaunchError, f"write it with `loom plan ... --emit {directory}`",
                                      f"emit the plan again (`loom plan ... --emit {directory}`)")
    if manifest.get("format") != FORMAT:
        raise LaunchError(f"{path}: manifest format {manifest.get('format')} is not {FORMAT}: emit the plan again with "
                          f"this loom (`loom plan ... --emit {directory}`)")
    _check_fields(path, manifest)
    return manifest


def _check_fields(path, manifest):
    world = manifest.get("world_size")
    if type(world) is not int or world < 1:
        raise LaunchError(f"{path}: world_size {world!r}: a program has at least one rank (emit the plan again)")

    def listed(key, check, what):
        value = manifest.get(key)
        if not isinstance(value, list) or len(value) != world:
            count = len(value) if isinstance(value, list) else "no"
            raise LaunchError(f"{path}: {count} entries in '{key}' for world_size {world}: the manifest does not fit "
                              f"together (emit the plan again)")
        for rank, entry in enumerate(value):
            if not check(rank, entry):
                raise LaunchError(f"{path}: {key}[{rank}] is {entry!r}, not {what} (emit the plan again)")

    listed("ranks", lambda r, name: name == f"rank_{r}.py", "rank_<r>.py")
    listed("rank_sha256", lambda r, digest: isinstance(digest, str) and _HEX64.fullmatch(digest), "a sha256 hex digest")
    listed("loads", lambda r, loads: isinstance(loads, list), "a list of loads")
    plan_id = manifest.get("plan_id")
    if not isinstance(plan_id, str) or not _HEX64.fullmatch(plan_id):
        raise LaunchError(f"{path}: plan_id {plan_id!r} is not a sha256 hex digest (emit the plan again)")
    groups = manifest.get("groups")
    if not isinstance(groups, list) or not all(
            isinstance(g, list) and g and all(type(r) is int and 0 <= r < world for r in g) for g in groups):
        raise LaunchError(f"{path}: 'groups' must list groups of ranks 0..{world - 1} (emit the plan again)")
    for key in ("tensors", "sub_ops"):
        if not isinstance(manifest.get(key), dict):
            raise LaunchError(f"{path}: '{key}' is missing or not an object (emit the plan again)")


def check_programs(directory, manifest):
    """Every rank_<r>.py is the file the manifest was emitted with (its sha256)."""
    for rank, (name, want) in enumerate(zip(manifest["ranks"], manifest["rank_sha256"])):
        path = pathlib.Path(directory) / name
        if not path.is_file():
            raise LaunchError(f"{path} is missing: rank {rank}'s program (emit the plan again)")
        got = hashlib.sha256(path.read_bytes()).hexdigest()
        if got != want:
            raise LaunchError(f"{path} is not the program manifest.json was emitted with (sha256 {got[:16]}..., the "
                              f"manifest has {want[:16]}...): it was edited, truncated or written by another plan; "
                              f"emit the plan again (`loom plan ... --emit {directory}`)")


def restamp(directory):
    """After editing rank programs on purpose (a print, a test's injected fault): records their new sha256 in
    DIR/manifest.json, so the launcher runs them. The plan id stays: the programs claim the same plan."""
    path = pathlib.Path(directory) / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["rank_sha256"] = [hashlib.sha256((pathlib.Path(directory) / name).read_bytes()).hexdigest()
                               for name in manifest["ranks"]]
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


@functools.lru_cache(maxsize=64)
def _statements(path):
    """(lines of the file, {line number: instruction index}) of a rank program: each statement of step() is one
    instruction, except rt.keep (a reported result)."""
    try:
        lines = pathlib.Path(path).read_text().splitlines()
    except OSError:
        return [], {}
    index, numbered, inside = 0, {}, False
    for number, text in enumerate(lines, start=1):
        if text.startswith("def step("):
            inside = True
        elif inside and _INSTRUCTION.match(text) and not text.lstrip().startswith("rt.keep("):
            numbered[number] = index
            index += 1
    return lines, numbered


# The statements codegen writes for instructions: `x = rt.load(...)`, `a, b = rt.compute(...)`, `rt.send(...)`,
# `del x` (a free). Anything else in step() was written by hand.
_INSTRUCTION = re.compile(r"    (?:[A-Za-z_][\w, ]* = )?rt\.\w+\(|    del \w")


def where(directory, rank, line):
    """A line of rank_<rank>.py as a reader wants it: "instruction 57 (all-reduce of 'h' ...; rank_1.py line
    123)" for an instruction's statement (the plan's comment above it, else the statement), else "rank_1.py line
    130 (`time.sleep(60)`), after instruction 56"."""
    name = f"rank_{rank}.py"
    lines, numbered = _statements(str(pathlib.Path(directory) / name))
    if not 1 <= line <= len(lines):
        return f"{name} line {line}"
    text = lines[line - 1].strip()
    if line in numbered:
        comment = lines[line - 2].strip() if line >= 2 else ""
        label = comment.lstrip("# ") if comment.startswith("#") else text
        return f"instruction {numbered[line]} ({_short(label)}; {name} line {line})"
    before = [i for n, i in numbered.items() if n < line]
    after = f", after instruction {max(before)}" if before else ""
    return f"{name} line {line} (`{_short(text)}`){after}"


def _short(text, width=110):
    return text if len(text) <= width else text[:width - 3] + "..."
