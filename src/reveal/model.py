"""One analysis, fitted once: :class:`Reveal`, in the scikit-learn manner.

    model = Reveal()                       # parameters only, as given
    model.fit(baseline)                    # a run directory, CSV, smd:/asd: spec or Telemetry
    report = model.report(run)             # a Report: windows, verdicts, evidence, claims
    analysis = model.score_windows(run)    # the same as numbers (an Analysis)
    model.save("host.model"); Reveal.load("host.model")
    model.partial_fit(analysis)            # a stream: learn from what was just scored

``reveal analyze``, ``evaluate``, ``validate``, ``demo`` and ``profile`` all go through it.
Settings that depend on the data's resolution come from a preset chosen from the
baseline's sampling interval (:mod:`reveal.analysis.presets`); ``overrides`` change single
settings of it by dotted name (``{"window.size_s": 5.0}``).

Without a baseline, :meth:`Reveal.fit_report` fits on the run itself, robustly, and says so.

A baseline that keeps itself current (``evaluate --mode stream``, the Python API): score
what comes in, in time order, and give each scored chunk back with
:meth:`Reveal.partial_fit`.
Every ``refit.every_s`` seconds of data a new model generation is fitted on the recent
windows that were not flagged; a window is flagged only when all kept generations agree
(:mod:`reveal.analysis.consensus`). While nothing is given back, scoring is that of the
baseline's model alone, as before. That is ``refit.scheme = "generations"``; under
``"quiet_span"`` a whole new model is fitted instead on the raw samples of the latest
quiet ``refit.span_s`` (:mod:`reveal.analysis.quietspan`), the scheme ``reveal watch``
keeps its model current by (``--refit-every`` on the latest ``--learn``,
``ModelKeeper.maybe_refit`` in :mod:`reveal.live.keeper`, the fit in a child process;
docs/watch.md).

A model file is a header line of JSON (format, format version, Reveal version, settings,
baseline, SHA-256 of the payload) and a pickled payload, written atomically. Load only model
files you wrote: unpickling runs code.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import pickle
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np
from sklearn.base import BaseEstimator

from reveal._version import __version__
from reveal.analysis.consensus import Consensus
from reveal.analysis.pipeline import (
    Analysis,
    FittedAnalysis,
    Progress,
    ensemble_options,
    explain_windows,
    fit_analysis,
    fit_and_score_windows,
    rows_per_window,
    score_windows,
    stride_seconds,
    usable_channels,
)
from reveal.analysis.presets import preset, preset_for, with_overrides
from reveal.analysis.quietspan import QuietSpan
from reveal.config import AnalyzeConfig
from reveal.errors import InputError, ModelFormatError
from reveal.frame import Telemetry
from reveal.report.build import build_report
from reveal.report.schema import Report
from reveal.store.sources import default_baseline, open_source, parse_labelled

MAGIC = b"REVEAL-MODEL\n"
MODEL_FORMAT = "reveal-model"
MODEL_FORMAT_VERSION = 3  # 2: model generations and the stream state (consensus_);
# 3: the analysis modules under reveal.analysis (a pickled fit names their classes)

Source = str | Path | Telemetry


def load_source(source: Source) -> Telemetry:
    """Telemetry from a run directory, CSV file, ``smd:``/``asd:`` spec, or as given."""
    return source if isinstance(source, Telemetry) else open_source(source)


class Reveal(BaseEstimator):
    """The analysis of one host: fit on a baseline, score runs, keep the fit in a file.

    A scikit-learn estimator in its parameters: they are stored as given, so
    ``get_params(deep)``, ``set_params`` and ``sklearn.base.clone`` work (a clone is
    unfitted). It has no ``score`` method: :meth:`report` words a run's findings,
    :meth:`score_windows` gives them as numbers.

    Parameters
    ----------
    preset : str
        ``"auto"`` (from the baseline's sampling interval), ``"telemetry"`` or ``"minute"``.
    config : AnalyzeConfig, optional
        Every setting at once (then ``preset`` and ``overrides`` are not used).
    overrides : mapping, optional
        Settings changed from the preset, by dotted name (``"detect.persistence_s"``).
    metric_set : sequence of str, optional
        Score only these channels (a metric set from ``reveal select``); no pruning.

    Attributes
    ----------
    fitted_ : FittedAnalysis
        Channels, windows, floors, fitted detectors and thresholds (after :meth:`fit`).
    config_ : AnalyzeConfig
        The settings used.
    consensus_ : Consensus or None
        Model generations and what the stream showed them (after :meth:`partial_fit`;
        None before: the baseline's model alone).
    scale_consensus_ : list of Consensus or None
        The same for each extra window size (``fitted_.scales``).
    quiet_ : QuietSpan or None
        With ``refit.scheme = "quiet_span"``: when the model was last fitted and when the
        stream last had a window above the threshold (after :meth:`partial_fit`).
    """

    def __init__(self, preset: str = "auto", config: AnalyzeConfig | None = None,
                 overrides: Mapping[str, Any] | None = None,
                 metric_set: Sequence[str] | None = None) -> None:
        self.preset = preset
        self.config = config
        self.overrides = overrides
        self.metric_set = metric_set

    # -- settings --------------------------------------------------------------------
    def resolve_config(self, interval_s: float) -> AnalyzeConfig:
        """The settings for data sampled every ``interval_s`` seconds."""
        if self.config is not None:
            return self.config
        base = preset_for(interval_s) if self.preset == "auto" else preset(self.preset)
        return with_overrides(base, self.overrides)

    # -- fitting ---------------------------------------------------------------------
    def fit(self, baseline: Source, *, channels: Sequence[str] | None = None,
            robust: bool = False, progress: Progress | None = None,
            skip_ns: Sequence[tuple[int, int]] = ()) -> Self:
        """Fit on a clean ``baseline``; ``channels``: only these derived channels (those of
        the run to score); ``robust``: the baseline may hold anomalies; ``skip_ns``:
        ``[start, end)`` spans (monotonic ns of the baseline's clock) whose windows are left
        out, such as a live watch's own model fits."""
        tel = load_source(baseline)
        self.config_ = self.resolve_config(tel.interval_s)
        self.fitted_ = fit_analysis(tel, self.config_, channels=channels,
                                    metric_set=self.metric_set, robust=robust,
                                    progress=progress, skip_ns=skip_ns)
        self.consensus_ = None
        self.scale_consensus_ = None
        self.quiet_ = None
        # the quiet-span scheme learns only from samples after the baseline's
        self.quiet_from_ns_ = int(tel.timestamps_ns[-1]) if tel.n_samples else 0
        return self

    def fit_report(self, run: Source, *, progress: Progress | None = None) -> Report:
        """Fit on ``run`` itself, robustly (median/MAD, outlying windows left out of the
        refit), and score it; the report says it was self-fitted."""
        tel = load_source(run)
        self.config_ = self.resolve_config(tel.interval_s)
        self.fitted_, analysis = fit_and_score_windows(tel, self.config_,
                                                       metric_set=self.metric_set,
                                                       progress=progress)
        self.consensus_ = None
        self.scale_consensus_ = None
        self.quiet_ = None
        self.quiet_from_ns_ = int(tel.timestamps_ns[-1]) if tel.n_samples else 0
        return build_report(self.fitted_, analysis)

    # -- following a stream ----------------------------------------------------------
    def _consensus(self) -> Consensus:
        fitted = self._check_fitted()
        if getattr(self, "consensus_", None) is None:
            self.consensus_ = _new_consensus(fitted)
        return self.consensus_

    def _scale_consensus(self) -> list[Consensus]:
        """One consensus per extra window size (``fitted_.scales``), made when first needed."""
        scales = getattr(self._check_fitted(), "scales", None) or []
        if len(getattr(self, "scale_consensus_", None) or []) != len(scales):
            self.scale_consensus_ = [_new_consensus(s) for s in scales]
        return self.scale_consensus_

    def scoring_fitted(self) -> FittedAnalysis:
        """The fitted analysis that scores now (for callers of
        :func:`reveal.analysis.pipeline.score_windows`): the baseline's model alone, or, once data
        was given back by :meth:`partial_fit`, the same with the consensus of the model
        generations in place of its ensemble. Fetch it again after each ``partial_fit``."""
        return self._scoring()

    def _scoring(self) -> FittedAnalysis:
        fitted = self._check_fitted()
        consensus = getattr(self, "consensus_", None)
        if consensus is not None and consensus.streaming:
            fitted = dataclasses.replace(fitted, ensemble=consensus)
        scales = getattr(fitted, "scales", None) or []
        kept = getattr(self, "scale_consensus_", None) or []
        if scales and len(kept) == len(scales) and any(c.streaming for c in kept):
            fitted = dataclasses.replace(fitted, scales=[
                dataclasses.replace(s, ensemble=c) if c.streaming else s
                for s, c in zip(scales, kept, strict=True)])
        return fitted

    def partial_fit(self, recent: Source | Analysis, *, lead_in: Source | None = None,
                    refit: bool | None = None,
                    span: Callable[[int, int], Source] | None = None) -> Self:
        """Learn from data just scored: ``recent`` is the :class:`Analysis` this model made
        of the windows that follow those given before (or a run, scored here first, with
        ``lead_in`` as in :meth:`score_windows`).

        With ``refit.scheme = "generations"`` (the default), its windows move the
        drift-following centre on and join the recent buffer; when ``refit.every_s``
        seconds of data have passed since the last refit (``refit=None``; ``True``: now;
        ``False``: not), a new model generation is fitted on the recent windows that were
        not flagged (with refits off in the settings, ``refit=True`` fits it on the
        unflagged windows of ``recent`` itself). Scoring then flags a window only when
        every kept generation agrees.

        With ``"quiet_span"`` (how ``reveal watch`` keeps its model current): when a refit
        is due (``refit=True``: now) and the latest ``refit.span_s`` held no window above
        the threshold, the model is fitted again on the raw samples of that span, which
        ``span(start_ns, end_ns)`` returns (the windows' clock), and scores alone. Either
        way, the windows carry the stream's state (drift-following centre, persistence)
        on to the next call, so that between refits scoring chunk by chunk is scoring at
        once."""
        analysis = recent if isinstance(recent, Analysis) else self.score_windows(
            recent, lead_in=lead_in)
        consensus = self._consensus()
        pairs = [(consensus, analysis)]
        if getattr(analysis, "sizes", None):  # each window size keeps its own generations
            pairs = list(zip([consensus, *self._scale_consensus()], analysis.sizes,
                             strict=True))
        for keeper, scored in pairs:
            v = scored.verdicts
            above = (scored.above if scored.above is not None
                     else v.combined > v.combined_threshold)
            keeper.advance(scored.features.values, v.flagged, above, scored.windows.end_ns,
                           v.combined, signs=scored.signs)
        if self.config_.refit.scheme == "quiet_span":  # the stream state, no generations
            return self._quiet_span_step(analysis, refit, span)
        due = consensus.refit_due() if refit is None else refit  # the main size's clock
        for keeper, scored in pairs:
            if refit and _refits_off(self.config_):  # learn from ``recent`` itself
                keeper.fit_generation(scored.features.values, scored.verdicts.flagged)
            elif due:
                keeper.fit_generation()
        return self

    def _quiet_span_step(self, analysis: Analysis, refit: bool | None,
                         span: Callable[[int, int], Source] | None) -> Self:
        """``partial_fit`` under the quiet-span scheme (:mod:`reveal.analysis.quietspan`)."""
        if span is None:
            raise InputError('refit.scheme "quiet_span" refits on raw samples: pass '
                             'span=, a function of (start_ns, end_ns) that returns them')
        settings = self.config_.refit
        windows, v = analysis.windows, analysis.verdicts
        if windows.end_ns.size == 0:
            return self
        clock = getattr(self, "quiet_", None)
        if clock is None:
            every = settings.every_s
            clock = QuietSpan(span_ns=int(settings.span_s * 1e9),
                              every_ns=int(every * 1e9) if every else 0, retry_ns=0)
            # the model began to score at the first scored window's end (its start may
            # lie in a lead-in, another recording)
            clock.adopted(int(windows.end_ns[0]))
            self.quiet_ = clock
        clock.seen(windows.end_ns, v.combined > v.combined_threshold)
        now = int(windows.end_ns[-1])
        if not (clock.due(now) if refit is None else refit):
            return self
        if clock.why_not(now, recorded_from_ns=int(getattr(self, "quiet_from_ns_", 0))):
            clock.postpone(now)
            return self
        start, end = clock.span(now)
        tel = load_source(span(start, end))
        try:
            self._fit_fresh(tel)
        except InputError:  # too little usable data in the span: keep the model in use
            clock.retry_later(now)
            return self
        clock.refits += 1
        clock.adopted(now)
        return self

    def _fit_fresh(self, tel: Telemetry) -> None:
        """Replace the fit with one on ``tel`` (the same settings), keeping the stream's
        quiet-span clock."""
        clock, since = getattr(self, "quiet_", None), getattr(self, "quiet_from_ns_", 0)
        fresh = copy.copy(self).fit(tel)
        self.config_, self.fitted_ = fresh.config_, fresh.fitted_
        self.consensus_ = self.scale_consensus_ = None
        self.quiet_, self.quiet_from_ns_ = clock, since

    @property
    def generations_(self) -> int:
        """Model generations that vote (1: the baseline's alone)."""
        consensus = getattr(self, "consensus_", None)
        return 1 if consensus is None else len(consensus.generations)

    def without_persistence(self, threshold_factor: float = 1.0) -> Reveal:
        """This model scoring every window on its own (persistence left to the caller, as
        the watch applies it across its scoring calls), generations included; a copy.
        ``threshold_factor`` multiplies the combined threshold (1: as fitted; for tests
        and tuning, and only for a model without generations)."""
        fitted = self._check_fitted()
        if not (np.isfinite(threshold_factor) and threshold_factor > 0):
            raise InputError(f"threshold factor must be positive, got {threshold_factor}")
        consensus = getattr(self, "consensus_", None)
        ensemble = fitted.ensemble
        if threshold_factor != 1.0:
            if consensus is not None and consensus.streaming:
                raise InputError("a threshold factor applies to a model without generations")
            ensemble = copy.copy(ensemble)
            ensemble.combined_threshold_ = float(ensemble.combined_threshold_) * threshold_factor
        config = dataclasses.replace(
            fitted.config, detect=dataclasses.replace(fitted.config.detect, persistence_s=0.0))
        model = copy.copy(self)
        model.fitted_ = dataclasses.replace(fitted, config=config, ensemble=ensemble)
        model.config_ = config
        model.consensus_ = consensus
        return model

    # -- scoring ---------------------------------------------------------------------
    def _check_fitted(self) -> FittedAnalysis:
        if not hasattr(self, "fitted_"):
            raise InputError("the model is not fitted (call fit() or load a model file)")
        return self.fitted_

    def score_windows(self, run: Source, *, lead_in: Source | None = None,
                      progress: Progress | None = None,
                      history: np.ndarray | None = None) -> Analysis:
        """Score ``run``: every window's verdict and evidence, as numbers (an
        :class:`Analysis`). ``lead_in``: a recording directly before the run (its last
        samples complete the first windows). ``history``: the feature rows of the windows
        scored just before (a live scorer's), so that a level lasting across calls is
        judged as lasting."""
        lead = load_source(lead_in) if lead_in is not None else None
        return score_windows(self._scoring(), load_source(run), lead_in=lead,
                             progress=progress, history=history)

    def report(self, run: Source | Analysis, *, lead_in: Source | None = None,
               progress: Progress | None = None) -> Report:
        """Score ``run`` (or take the :class:`Analysis` :meth:`score_windows` made) and
        word the result: a :class:`Report`."""
        analysis = run if isinstance(run, Analysis) else self.score_windows(
            run, lead_in=lead_in, progress=progress)
        return build_report(self._scoring(), analysis)

    def explain(self, analysis: Analysis, rows: np.ndarray) -> np.ndarray:
        """Per-column contributions (len(rows), K) for any windows of ``analysis``."""
        return explain_windows(self._scoring(), analysis, rows)

    # -- persistence -----------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the fitted model to ``path`` atomically; returns the path."""
        fitted = self._check_fitted()
        consensus = getattr(self, "consensus_", None)
        payload = pickle.dumps({"params": self._saved_params(), "fitted": fitted,
                                "consensus": consensus,
                                "scale_consensus": getattr(self, "scale_consensus_", None),
                                "quiet": getattr(self, "quiet_", None),
                                "quiet_from_ns": getattr(self, "quiet_from_ns_", 0)},
                               protocol=pickle.HIGHEST_PROTOCOL)
        header = {"format": MODEL_FORMAT, "format_version": MODEL_FORMAT_VERSION,
                  "reveal_version": __version__, "preset": fitted.config.preset,
                  "channels": len(fitted.channels), "baseline": fitted.baseline,
                  "generations": 1 if consensus is None else len(consensus.generations),
                  "sha256": hashlib.sha256(payload).hexdigest(), "bytes": len(payload)}
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            with open(tmp, "wb") as handle:
                handle.write(MAGIC)
                handle.write(json.dumps(header, sort_keys=True, default=str).encode() + b"\n")
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def load(cls, path: str | Path) -> Reveal:
        """Read a model written by :meth:`save`; a file of another format version, a
        truncated or altered file, or not a model at all is an :class:`InputError`."""
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read the model file: {exc.strerror}", str(path)) from None
        if not data.startswith(MAGIC):
            raise InputError("not a Reveal model file", str(path))
        line_end = data.find(b"\n", len(MAGIC))
        try:
            header = json.loads(data[len(MAGIC):line_end])
        except (ValueError, UnicodeDecodeError):
            raise InputError("damaged model file (unreadable header)", str(path)) from None
        version = header.get("format_version")
        if header.get("format") != MODEL_FORMAT or version != MODEL_FORMAT_VERSION:
            raise ModelFormatError(f"model file format {version} (written by Reveal "
                             f"{header.get('reveal_version', '?')}); this Reveal "
                             f"({__version__}) reads format {MODEL_FORMAT_VERSION}: fit "
                             f"the model again", str(path))
        payload = data[line_end + 1:]
        if len(payload) != header.get("bytes") or \
                hashlib.sha256(payload).hexdigest() != header.get("sha256"):
            raise InputError("damaged model file (truncated or altered: checksum mismatch)",
                             str(path))
        try:
            state = pickle.loads(payload)
        except (AttributeError, ImportError, TypeError, ValueError, pickle.UnpicklingError) \
                as exc:  # intact (checksum), but its classes are not this Reveal's
            raise ModelFormatError(f"model written by Reveal {header.get('reveal_version', '?')}"
                                   f" cannot be read by this Reveal ({__version__}: "
                                   f"{type(exc).__name__}): fit the model again",
                                   str(path)) from None
        model = cls(**state["params"])
        model.fitted_ = state["fitted"]
        model.config_ = model.fitted_.config
        model.consensus_ = state.get("consensus")
        model.scale_consensus_ = state.get("scale_consensus")
        model.quiet_ = state.get("quiet")
        model.quiet_from_ns_ = state.get("quiet_from_ns", 0)
        return model

    def _saved_params(self) -> dict[str, Any]:
        """The construction parameters as a model file keeps them (plain dict and list)."""
        return {"preset": self.preset, "config": self.config,
                "overrides": dict(self.overrides) if self.overrides else None,
                "metric_set": list(self.metric_set) if self.metric_set else None}


def _new_consensus(fitted: FittedAnalysis) -> Consensus:
    """A consensus of generations starting from ``fitted``'s ensemble alone."""
    stride = stride_seconds(fitted.window, fitted.interval_s)
    rows = rows_per_window(fitted.window, fitted.interval_s)
    stride_rows = max(1, round(stride / fitted.interval_s))
    return Consensus(fitted.ensemble, fitted.config.refit, fitted.config.detect,
                     ensemble_options(fitted.config, stride), fitted.floors, stride,
                     guard=-(-rows // stride_rows))


def _refits_off(config: AnalyzeConfig) -> bool:
    """Whether periodic refits are off (then only the windows of the current drift block
    are kept between calls, and a forced refit learns from the data just given)."""
    return config.refit.every_s is None


def fit_for_run(model: Reveal, run: Telemetry, baseline: Telemetry,
                progress: Progress | None = None) -> Reveal:
    """Fit ``model`` on ``baseline`` over the channels ``run`` has data in."""
    return model.fit(baseline, channels=usable_channels(run), progress=progress)


def report_run(run: Source, baseline: Source | None = None, *, model: Reveal | None = None,
               progress: Progress | None = None) -> Report:
    """Report on one run: fitted on ``baseline`` (for ``smd:M``/``asd:M``, the machine's
    ``train`` part by default, whose last rows also complete the first windows), or on
    the run itself, robustly, when there is none."""
    model = model if model is not None else Reveal()
    tel = load_source(run)
    if baseline is None and not isinstance(run, Telemetry):
        baseline = default_baseline(run)
    if baseline is None:
        return model.fit_report(tel, progress=progress)
    base = load_source(baseline)
    fit_for_run(model, tel, base, progress)
    lead = base if continues(run, baseline) else None
    return model.report(tel, lead_in=lead, progress=progress)


def continues(run: Source, baseline: Source) -> bool:
    """Whether ``run`` directly follows ``baseline`` in time (a labelled machine's test
    part after its train part)."""
    if isinstance(run, Telemetry) or isinstance(baseline, Telemetry):
        return False
    r, b = parse_labelled(str(run)), parse_labelled(str(baseline))
    return (r is not None and b is not None and r[:2] == b[:2]
            and r[2] == "test" and b[2] == "train")
