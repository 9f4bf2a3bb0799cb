"""python -m loom_profile REQUESTS --out RESULTS   time the ops of a request file (docs/profiling.md)
python -m loom_profile --probe --out FILE          report the device and torch version only

Exit codes: 0 done (unsupported requests are listed in the results, not errors), 2 bad arguments or a
malformed request file, 3 torch cannot be imported.
"""

import argparse
import json
import os
import sys
import warnings

from .priority import SessionPriority

NO_TORCH_EXIT = 3
BAD_INPUT_EXIT = 2


def _parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m loom_profile", description=__doc__.splitlines()[0])
    parser.add_argument("requests", nargs="?", help="request file written by `loom profile --requests`")
    parser.add_argument("--out", required=True, help="results file to write")
    parser.add_argument("--probe", action="store_true", help="report the device only; time nothing")
    parser.add_argument("--device", default="auto", help="auto (cuda when available), cuda, cuda:N or cpu")
    parser.add_argument("--warmup", type=int, help="untimed calls per op")
    parser.add_argument("--repeats", type=int, help="timed repeats per op (median taken)")
    parser.add_argument("--min-time", type=float, dest="min_time", help="seconds each repeat lasts at least")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    if not args.probe and not args.requests:
        parser.error("give a request file, or --probe")
    return args


def _write_atomically(path, doc):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def main(argv=None):
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    # torch warns when numpy is absent; the timer does not use numpy.
    warnings.filterwarnings("ignore", message=".*NumPy.*")
    # A view (reshape of a contiguous tensor) captures an empty CUDA graph: correct, it costs nothing.
    warnings.filterwarnings("ignore", message="The CUDA Graph is empty")
    try:
        import torch
    except ImportError as e:
        print(f"loom_profile: cannot import torch ({e}); `make setup` creates .venv with torch", file=sys.stderr)
        return NO_TORCH_EXIT
    from . import RESULTS_VERSION, REQUEST_VERSION
    from .runner import timing_options

    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
        name = torch.cuda.get_device_name(device)
    else:
        name = "cpu"
    doc = {"version": RESULTS_VERSION, "device": {"type": device.type, "name": name}, "torch": torch.__version__,
           "results": [], "unsupported": []}
    if args.probe:
        _write_atomically(args.out, doc)
        return 0

    try:
        with open(args.requests, encoding="utf-8") as f:
            request_doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        print(f"loom_profile: {args.requests}: cannot read the request file: {e}", file=sys.stderr)
        return BAD_INPUT_EXIT
    if not isinstance(request_doc, dict) or request_doc.get("version") != REQUEST_VERSION \
            or not isinstance(request_doc.get("requests"), list):
        print(f"loom_profile: {args.requests}: not a version {REQUEST_VERSION} request file", file=sys.stderr)
        return BAD_INPUT_EXIT
    options = timing_options(device, request_doc.get("timing"), vars(args))
    if device.type == "cpu":
        torch.set_num_threads(1)  # as every rank of the runtime (launch._worker): the ops a plan runs are timed
    torch.manual_seed(0)
    generator = torch.Generator(device=device)
    generator.manual_seed(0)
    with SessionPriority():  # started as `nice -n -19 loom profile ...`: ahead of other sessions too (priority.py)
        code = _time_requests(args, request_doc["requests"], device, options, generator, doc)
    if code != 0:
        return code
    _write_atomically(args.out, doc)
    return 0


def _time_requests(args, requests, device, options, generator, doc):
    """Times each request into doc's results (or its unsupported list); BAD_INPUT_EXIT on a malformed one."""
    from .runner import BadRequest, run_request

    for index, request in enumerate(requests):
        if not isinstance(request, dict) or not isinstance(request.get("key"), dict):
            print(f"loom_profile: {args.requests}: requests[{index}] needs a \"key\" object", file=sys.stderr)
            return BAD_INPUT_EXIT
        try:
            timing, reason = run_request(request, index, device, options, generator)
        except BadRequest as e:
            print(f"loom_profile: {args.requests}: {e}", file=sys.stderr)
            return BAD_INPUT_EXIT
        label = f"{request['key'].get('op')} {request['key'].get('shapes')}"
        if timing is not None:
            seconds = max(timing.seconds, 1e-9)  # a view costs ~nothing, but the database needs a positive time
            doc["results"].append({"key": request["key"], "seconds": seconds, "fastest": timing.fastest,
                                   "slowest": timing.slowest, "calls_per_repeat": timing.calls_per_repeat,
                                   "method": timing.method})
            if not args.quiet:
                print(f"[{index + 1}/{len(requests)}] {label}: {timing.seconds * 1e6:.1f} us ({timing.method})",
                      file=sys.stderr)
        else:
            doc["unsupported"].append({"key": request["key"], "reason": reason})
            if not args.quiet:
                print(f"[{index + 1}/{len(requests)}] {label}: skipped ({reason})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
