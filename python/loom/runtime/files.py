"""Files the runtime writes whole or not at all (results, checkpoint shards and manifests, error reports): the
bytes go to a temporary file beside the target, are flushed to disk, and the file is renamed into place, so a
reader sees the old file, no file or the new one, never part of one, even after a crash."""

import json
import os
import pathlib

import torch


def write_atomically(path, write):
    """Calls write(binary file) on a temporary file beside `path`, fsyncs it, renames it to `path` and fsyncs the
    directory (so the rename itself survives a crash). The temporary file is removed if anything fails."""
    path = pathlib.Path(path)
    temporary = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        with open(temporary, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def save_atomically(value, path):
    """torch.save(value, path), whole or not at all."""
    write_atomically(path, lambda f: torch.save(value, f))


def write_text_atomically(path, text):
    write_atomically(path, lambda f: f.write(text.encode()))


def read_json_object(path, error, missing, damaged):
    """The JSON object in `path`. Else raises error(message) naming the file: "<path> does not exist: <missing>",
    or, for contents that are not a JSON object, the parser's complaint and then `damaged` (the fix)."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise error(f"{path} does not exist: {missing}")
    try:
        value = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise error(f"{path} is not JSON ({e}): {damaged}") from None
    if not isinstance(value, dict):
        raise error(f"{path} is not a JSON object: {damaged}")
    return value
