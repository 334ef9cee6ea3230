"""Fit a watch's model in a child process, so the watch's own heap never holds the fit.

A fit reads the whole learning span (10 minutes × ~1,000 channels: ~50 MB of rows) and
makes its features and detectors: a few hundred MB of short-lived arrays. In the
long-lived watch process, glibc keeps much of that heap fragmented after the fit even when
trimmed (a 10-minute learn left the watch about 35 MB above one that learned for 90 s).
The child reads the span from the recording on disk (``read_run``, while it is still being
written), fits ``Reveal().fit`` and saves the model file atomically; the watch then loads
the file (``Reveal.load``), which holds only the fitted model. Same code, same data, same
model as a fit in the watch's process would make; the CPU is the child's (counted in the
watch's process tree) plus its start (about 2 s of imports).

    python -m reveal.live.fitproc RUN START_NS END_NS OUT [SETTINGS_JSON]

``START_NS``/``END_NS``: the span on the recording's monotonic clock (nanoseconds);
``SETTINGS_JSON``: analysis settings by dotted name (``--set`` of the watch), an object.
Exit 0 with the model written to ``OUT``; 2 with one line on stderr when the span cannot
be fitted (too little data, unreadable recording).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from reveal.errors import InputError

#: the longest a fit may take before it is abandoned (seconds)
FIT_TIMEOUT_S = 1800.0


def fit_in_child(run: Path, start_ns: int, end_ns: int, out: Path,
                 should_stop: Callable[[], bool] = lambda: False,
                 timeout_s: float = FIT_TIMEOUT_S,
                 settings: Mapping[str, Any] | None = None,
                 skip_ns: Sequence[tuple[int, int]] = ()) -> Path:
    """Fit the recorded ``[start_ns, end_ns)`` of ``run`` in a child process, the model
    saved to ``out``; returns ``out``. ``settings``: analysis settings by dotted name;
    ``skip_ns``: spans (monotonic ns) whose windows the fit leaves out.
    InputError with the child's reason when it could not fit; InterruptedError when
    ``should_stop()`` became true meanwhile (the child is ended)."""
    argv = [sys.executable, "-m", "reveal.live.fitproc", str(run), str(int(start_ns)),
            str(int(end_ns)), str(out)]
    if settings or skip_ns:
        argv.append(json.dumps(dict(settings or {})))
    if skip_ns:
        argv.append(json.dumps([[int(a), int(b)] for a, b in skip_ns]))
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.append(child.stderr.read()), daemon=True)
    reader.start()
    waited = 0.0
    try:
        while True:
            try:
                child.wait(0.5)
                break
            except subprocess.TimeoutExpired:
                waited += 0.5
                if should_stop() or waited >= timeout_s:
                    child.kill()
                    child.wait()
                    if should_stop():
                        raise InterruptedError("the watch is stopping") from None
                    raise InputError(f"the model fit took longer than {timeout_s:g} s") \
                        from None
    finally:
        reader.join(5)
    if child.returncode != 0:
        lines = [x for x in "".join(err).splitlines() if x.strip()]
        why = lines[-1] if lines else f"exit code {child.returncode}"
        raise InputError(f"model fit failed: {why.removeprefix('error: ')}")
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (4, 5, 6):
        print("error: usage: python -m reveal.live.fitproc RUN START_NS END_NS OUT "
              "[SETTINGS_JSON [SKIP_SPANS_JSON]]", file=sys.stderr)
        return 2
    from reveal.model import Reveal
    from reveal.store.run_reader import read_run

    run, out = Path(args[0]), Path(args[3])
    try:
        start_ns, end_ns = int(args[1]), int(args[2])
        settings = json.loads(args[4]) if len(args) >= 5 else {}
        if not isinstance(settings, dict):
            raise InputError("the settings must be a JSON object")
        spans = json.loads(args[5]) if len(args) == 6 else []
        if not (isinstance(spans, list) and all(
                isinstance(x, list) and len(x) == 2 and all(isinstance(v, int) for v in x)
                for x in spans)):
            raise InputError("the spans to leave out must be a JSON list of [start_ns, end_ns]")
        with warnings.catch_warnings():  # the journal being written may end mid-record
            warnings.simplefilter("ignore", UserWarning)
            tel = read_run(run, start_ns=start_ns, end_ns=end_ns)
        Reveal(overrides=settings or None).fit(
            tel, skip_ns=[(a, b) for a, b in spans]).save(out)
    except (InputError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
