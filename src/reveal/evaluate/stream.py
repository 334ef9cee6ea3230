"""``reveal evaluate --mode stream``: the live logic walked over a labelled machine's test part.

The model is fitted on ``train`` exactly as in batch mode; then ``test`` is cut into chunks
of ``chunk_s`` seconds (by default one refit period) and walked in time order. Each chunk
is scored by :meth:`Reveal.score_windows` with the generations that exist before it (its first
windows completed by the rows just before it), then given back with
:meth:`Reveal.partial_fit` — which moves the drift-following centre on and, once a refit
period of data has passed, fits a new generation on the recent unflagged windows. Nothing
looks ahead: a chunk's verdicts depend only on rows before its end and on models fitted
before its start.

With ``--set refit.scheme=quiet_span`` the walk measures how ``reveal watch`` keeps its
model current instead: every ``refit.every_s`` a whole new model is fitted on the raw rows
of the latest ``refit.span_s`` when no window in it was above the threshold
(:mod:`reveal.analysis.quietspan`, the rule the watch's keeper applies).

With refits off (``refit.every_s`` None) the walk gives exactly the batch verdicts
(tests/test_evaluate_stream.py).
"""

from __future__ import annotations

import time

import numpy as np

from reveal.errors import InputError
from reveal.evaluate.hitrate import channel_scores
from reveal.evaluate.machine_run import MachineRun
from reveal.frame import Telemetry
from reveal.model import Reveal, fit_for_run
from reveal.store.labelled import LabelledMachine

DEFAULT_CHUNK_S = 86400.0  # chunks without refits: one day of data


def chunk_rows(model: Reveal, interval_s: float, chunk_s: float | None = None) -> int:
    """Rows per chunk: ``chunk_s`` seconds, else the model's refit period, else one day."""
    seconds = chunk_s or model.config_.refit.every_s or DEFAULT_CHUNK_S
    return max(1, round(seconds / interval_s))


def walk(model: Reveal, lm: LabelledMachine, chunk_s: float | None = None,
         explain_rows: np.ndarray | None = None) -> dict:
    """Score ``lm.test`` chunk by chunk with a model fitted on ``lm.train``; returns per test
    row the combined score and verdict, and the contributions per test channel
    (len(explain_rows), C) of the rows asked for, each explained by the models that
    scored it."""
    train, test = lm.train, lm.test
    fitted = model.fitted_
    rows = chunk_rows(model, test.interval_s, chunk_s)
    lead_rows = 2 * max(fitted.window.size_rows or 1, 1) + 2
    combined = np.empty(test.n_samples)
    flagged = np.zeros(test.n_samples, dtype=bool)
    wanted = np.asarray(explain_rows if explain_rows is not None else [], dtype=np.int64)
    index = {c: i for i, c in enumerate(test.channels)}
    contrib = np.zeros((wanted.size, test.n_channels))  # per test channel
    chunks = 0
    for a in range(0, test.n_samples, rows):
        b = min(a + rows, test.n_samples)
        lead = train if a < lead_rows else test.slice_rows(a - lead_rows, a)
        analysis = model.score_windows(test.slice_rows(a, b), lead_in=lead)
        v = analysis.verdicts
        if v.combined.shape[0] != b - a:
            raise InputError(f"{lm.dataset}/{lm.machine}: {v.combined.shape[0]} windows for "
                             f"{b - a} test rows")
        combined[a:b], flagged[a:b] = v.combined, v.flagged
        inside = np.flatnonzero((wanted >= a) & (wanted < b))
        if inside.size:  # explained by the model in use (a quiet-span refit replaces it)
            column_channel = np.array([index[c] for c in model.fitted_.column_channels])
            contrib[inside] = channel_scores(model.explain(analysis, wanted[inside] - a),
                                             column_channel, test.n_channels)
        model.partial_fit(analysis, span=lambda start, end: _rows_between(test, start, end))
        chunks += 1
    state = getattr(model, "quiet_", None) or model.consensus_
    return {"combined": combined, "flagged": flagged, "channel_contributions": contrib,
            "chunks": chunks, "chunk_rows": rows,
            "consensus": state.describe() if state is not None else None}


def _rows_between(tel: Telemetry, start_ns: int, end_ns: int) -> Telemetry:
    """The rows of ``tel`` with timestamps in ``(start_ns, end_ns]`` (a span that ends
    with the window ending at ``end_ns``)."""
    a, b = np.searchsorted(tel.timestamps_ns, [start_ns, end_ns], side="right")
    return tel.slice_rows(int(a), int(b))


def run_stream(lm: LabelledMachine, model: Reveal, chunk_s: float | None = None) -> MachineRun:
    """The stream walk over ``lm.test`` (scored chunk by chunk, each given back with
    ``partial_fit``): a MachineRun."""
    t0 = time.perf_counter()
    fit_for_run(model, lm.test, lm.train)
    rows = np.flatnonzero(lm.labels == 1)
    out = walk(model, lm, chunk_s, rows)
    per_metric = out["channel_contributions"]
    consensus = out["consensus"] or {}
    extra = {"chunks": out["chunks"], "chunk_rows": out["chunk_rows"],
             "refits": consensus.get("refits", 0),
             "refits_waiting": consensus.get("refits_waiting", 0),
             "generations": len(consensus.get("generations", [])) or 1}
    return MachineRun(out["combined"], out["flagged"], per_metric, rows,
                      time.perf_counter() - t0, extra)
