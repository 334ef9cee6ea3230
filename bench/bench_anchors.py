"""Published simple baselines ("anchors") beside Reveal on every labelled SMD and ASD machine.

Every method is scored by the same code (``reveal.evaluate.metrics``) on the same rows
(``reveal.store.labelled.load_machine``): point-wise best F1 over thresholds, AUPRC,
point-wise F1 and event recall at the method's automatic threshold (None where the method
has no label-free threshold), and seconds. No point adjustment.

Anchors (each written from the description of its source; all fit on the ``train`` half):

- ``qv_pca_published`` — the PCA reconstruction-error baseline of Sarfraz et al., "Quo Vadis,
  Unsupervised Time Series Anomaly Detection?", ICML 2024 (ssarfraz/QuoVadisTAD:
  ``quovadis_tad/baselines/simple_baselines.py`` ``PCAError``;
  ``quovadis_tad/dataset_utils/data_utils.py`` ``preprocess_data``, ``normalise_scores``;
  ``quovadis_tad/evaluation/evaluation_utils.py``
  ``get_results_for_all_score_normalizations``), **as published**: min-max scaling fitted
  on train; PCA with 10 components fitted on train; per-sensor absolute reconstruction error
  of the test rows; each sensor's error normalised by median/IQR (+0.01), mean/std, or not at
  all, with the statistics fitted **on the test errors**; a centred moving average (row i
  takes the mean of rows i-5 .. i+3, the first 5 rows score 0, as ``normalise_scores`` with
  its default window does); the maximum over sensors. Per machine, the normalisation with
  the best F1 is reported (it uses the test labels). Not causal, no automatic threshold.
- ``qv_pca_causal`` — the same PCA error made causal: median/IQR statistics fitted on the
  **train** errors, one normalisation for every machine; a trailing mean over 10 rows (the
  first test rows take their leading rows from the end of train); maximum over sensors.
  Automatic threshold: the 99th percentile of the train rows' scores computed the same way.
- ``gauss_dk_pca`` and ``gauss_dk_tcnae`` — per-channel reconstruction errors scored with
  "Gauss-D-K" of Garg et al., "An Evaluation of Anomaly Detection and Diagnosis in
  Multivariate Time Series", IEEE TNNLS 2021 (astha-chem/mvts-ano-eval:
  ``src/evaluation/evaluation_utils.py`` ``get_dynamic_score_t``, ``get_dynamic_scores``,
  ``get_gaussian_kernel_scores``; settings in ``configs.py``). Per channel, a Gaussian is
  fitted to the errors of a trailing window (D, dynamic: mean and standard deviation of the
  last ``--gauss-window`` rows including the current one, 25,000 as their SMD setting;
  the window starts in train, so the first test rows are scored against train errors;
  ASD, absent from the paper, gets the same number of rows, i.e. all past rows); a row's
  channel score is the negative log upper-tail probability of its error (short window 1);
  channel scores are summed; K: smoothed with a Gaussian kernel of σ = 1 row (their SMD
  setting) made **one-sided** (taps 0..4σ rows back, normalised) so that it stays causal —
  theirs is centred. A standard deviation below 1e-6 counts as 1e-6 (theirs: exactly 0).

  - PCA (``src/algorithms/pca_recons.py`` ``PcaRecons``): standard scaling and PCA keeping
    90 % of the variance, both fitted on the first 80 % of train; error = squared
    reconstruction error per channel in scaled units.
  - TCN autoencoder (after ``src/algorithms/tcn_ed.py`` ``TcnED``, much smaller and fully
    causal here so it runs on one CPU core): min-max scaling fitted on the first 80 % of
    train; four dilated causal Conv1d layers (32 channels, kernel 3, dilations 1, 2, 4, 8:
    31 rows of context), a 1x1 bottleneck of min(channels // 6, 10) channels (their
    setting, linear) and a 1x1 decoder; trained with Adam (lr 1e-3, batch 128, mean squared
    error on each window's rows that see a full context) on windows of 50 rows (stride 2)
    of the first 80 % of train, for at most ``--tcn-epochs`` (50) epochs, stopping once the
    loss on the held-out last 20 % of train has not improved for 3 epochs and keeping the
    best epoch's weights (theirs: 100 epochs, patience 10, 3 layers of 6 channels, windows
    of 100 rows). Error = absolute error per channel of a row reconstructed from the window
    ending on it (the causal net computes every window's last row in one pass over train
    then test). One seed (0); a single machine's figures move by a few points with it.

  Automatic threshold for both: the 99th percentile of the scores of the held-out last
  20 % of train (scored the same way, their window reaching back into the first 80 %).
- ``reveal`` — ``reveal.evaluate.labelled.run_reveal`` (what ``reveal analyze`` does; its
  own automatic threshold); ``--set NAME=VALUE`` changes one analysis setting.

    python bench/bench_anchors.py                      # all 18 machines (~13 min, 2 cores)
    python bench/bench_anchors.py --machines machine-1-2 omi-1 --per-machine
    python bench/bench_anchors.py --methods reveal qv_pca_causal --set window.size_rows=20

Writes ``bench/results/anchors.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from provenance import analysis_settings, arguments, dataclass_settings, script_argv, write_result
from reveal.evaluate.anchors import (
    AUTO_QUANTILE,
    QV_COMPONENTS,
    Output,
    auto_flags,
    minmax,
    run_qv_causal,
    run_qv_published,
)

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("qv_pca_published", "qv_pca_causal", "gauss_dk_pca", "gauss_dk_tcnae", "reveal")
DATASETS = ("smd", "asd")
FIT_SHARE = 0.8  # Gauss-D-K anchors: models fit on this first share of train
GAUSS_WINDOW = 25_000
GAUSS_SIGMA = 1.0
GAUSS_MIN_STD = 1e-6
PCA_VARIANCE = 0.9
TCN_EPOCHS = 50  # at most; stops when the held-out loss has not improved for
TCN_PATIENCE = 3  # this many epochs, and keeps the best epoch's weights


# ---------------------------------------------------------------- Gauss-D-K anchors

def gauss_dk(errors: np.ndarray, window: int = GAUSS_WINDOW,
             sigma: float = GAUSS_SIGMA) -> np.ndarray:
    """Gauss-D-K score of every row of ``errors`` (rows in time order, channels in columns):
    per channel −log P(N(μ, σ²) > e_t), μ and σ of the trailing ``window`` rows (the current
    one included), summed over channels, then a one-sided Gaussian kernel."""
    from scipy.stats import norm

    n = errors.shape[0]
    x = errors - errors[: min(1000, n)].mean(axis=0)  # any constant shift: stable sums
    c1 = np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x, axis=0)])
    c2 = np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x * x, axis=0)])
    t = np.arange(n)
    lo = np.maximum(0, t - window + 1)
    count = (t + 1 - lo)[:, None].astype(np.float64)
    s1, s2 = c1[t + 1] - c1[lo], c2[t + 1] - c2[lo]
    mean = s1 / count
    var = np.where(count > 1, (s2 - s1 * mean) / np.maximum(count - 1, 1), 0.0)
    std = np.maximum(np.sqrt(np.maximum(var, 0.0)), GAUSS_MIN_STD)
    z = np.clip((x - mean) / std, -1e100, 1e100)
    per_row = -norm.logsf(z).sum(axis=1)
    taps = np.arange(int(4 * sigma) + 1)
    kernel = np.exp(-0.5 * (taps / sigma) ** 2)
    kernel /= kernel.sum()
    padded = np.r_[np.full(taps.size - 1, per_row[0]), per_row]
    return np.convolve(padded, kernel, mode="valid")


def _gauss_output(err_all: np.ndarray, n_train: int, n_fit: int, window: int,
                  extra: dict) -> Output:
    scores = gauss_dk(err_all, window)
    flagged, threshold = auto_flags(scores[n_fit:n_train], scores[n_train:])
    return Output(scores[n_train:], flagged, {**extra, "threshold": threshold})


def run_gauss_pca(train: np.ndarray, test: np.ndarray, window: int) -> Output:
    """Squared PCA error (standard scaling, 90 % variance) scored with Gauss-D-K."""
    from sklearn.decomposition import PCA

    n_fit = int(FIT_SHARE * train.shape[0])
    fit = train[:n_fit]
    mu, sd = fit.mean(axis=0), fit.std(axis=0)
    sd[sd == 0] = 1.0
    rows = (np.vstack([train, test]) - mu) / sd
    pca = PCA(n_components=PCA_VARIANCE, svd_solver="full").fit(rows[:n_fit])
    err = (rows - pca.inverse_transform(pca.transform(rows))) ** 2
    return _gauss_output(err, train.shape[0], n_fit, window,
                         {"components": int(pca.n_components_)})


def _tcn(channels: int, hidden: int = 32, dilations: tuple[int, ...] = (1, 2, 4, 8),
         kernel: int = 3) -> tuple[Any, int]:
    """The causal TCN autoencoder and its context (rows a reconstruction depends on)."""
    import torch
    from torch import nn

    class CausalConv(nn.Module):
        def __init__(self, cin: int, cout: int, dilation: int) -> None:
            super().__init__()
            self.pad = (kernel - 1) * dilation
            self.conv = nn.Conv1d(cin, cout, kernel, dilation=dilation)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv(nn.functional.pad(x, (self.pad, 0)))

    bottleneck = max(1, min(channels // 6, 10))
    layers: list[nn.Module] = []
    cin = channels
    for d in dilations:
        layers += [CausalConv(cin, hidden, d), nn.ReLU()]
        cin = hidden
    layers += [nn.Conv1d(hidden, bottleneck, 1), nn.Conv1d(bottleneck, hidden, 1),
               nn.ReLU(), nn.Conv1d(hidden, channels, 1)]
    return nn.Sequential(*layers), 1 + (kernel - 1) * sum(dilations)


def run_gauss_tcn(train: np.ndarray, test: np.ndarray, window: int, epochs: int,
                  seed: int = 0) -> Output:
    """Absolute error of a small causal TCN autoencoder scored with Gauss-D-K."""
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    n_fit = int(FIT_SHARE * train.shape[0])
    (rows,) = minmax(train[:n_fit], np.vstack([train, test]))
    series = torch.from_numpy(rows.T.astype(np.float32))  # (C, T)
    model, context = _tcn(rows.shape[1])
    length, stride, batch = 50, 2, 128
    starts = np.arange(0, n_fit - length + 1, stride)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
    offsets = torch.arange(length)
    held = series[None, :, : train.shape[0]]  # held-out rows scored with context before them

    def held_loss() -> float:
        model.eval()
        with torch.no_grad():
            return float(((model(held) - held)[..., n_fit:] ** 2).mean())

    losses: list[float] = []
    held_losses: list[float] = []
    best = (float("inf"), copy.deepcopy(model.state_dict()))
    for _ in range(epochs):
        model.train()
        total = 0.0
        for chunk in np.array_split(rng.permutation(starts), max(1, len(starts) // batch)):
            idx = torch.from_numpy(chunk)[:, None] + offsets  # (B, L)
            x = series[:, idx].permute(1, 0, 2)  # (B, C, L)
            loss = ((model(x) - x)[:, :, context - 1:] ** 2).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total += float(loss.detach()) * len(chunk)
        losses.append(total / len(starts))
        held_losses.append(held_loss())
        if held_losses[-1] < best[0]:
            best = (held_losses[-1], copy.deepcopy(model.state_dict()))
        elif len(held_losses) - 1 - int(np.argmin(held_losses)) >= TCN_PATIENCE:
            break
    model.load_state_dict(best[1])
    model.eval()
    with torch.no_grad():
        recon = model(series[None])[0]
    err = (recon - series).abs().T.numpy().astype(np.float64)
    return _gauss_output(err, train.shape[0], n_fit, window,
                         {"epochs_run": len(losses), "best_epoch": int(np.argmin(held_losses)) + 1,
                          "context_rows": context, "train_loss": losses,
                          "held_out_loss": held_losses})


# ---------------------------------------------------------------- scoring, driver

def score(labels: np.ndarray, out: Output, seconds: float) -> dict:
    """The common metrics of one method on one machine."""
    from reveal.evaluate.metrics import auprc, best_f1, event_prf, point_prf

    y = labels.astype(bool)
    best, _ = best_f1(y, out.scores)
    row: dict = {"best_f1": best.f1, "auprc": auprc(y, out.scores), "auto_f1": None,
                 "auto_precision": None, "auto_recall": None, "event_recall": None,
                 "flagged_share": None, "seconds": seconds}
    if out.flagged is not None:
        auto = point_prf(y, out.flagged)
        row.update(auto_f1=auto.f1, auto_precision=auto.precision, auto_recall=auto.recall,
                   event_recall=event_prf(y, out.flagged).recall,
                   flagged_share=float(out.flagged.mean()))
    row.update(out.extra)
    return row


def run_one(method: str, lm: Any, args: argparse.Namespace, settings: Any) -> Output:
    """One method on one labelled machine."""
    train, test = lm.train.values.astype(np.float64), lm.test.values.astype(np.float64)
    if method == "qv_pca_published":
        return run_qv_published(train, test, lm.labels)
    if method == "qv_pca_causal":
        return run_qv_causal(train, test)
    if method == "gauss_dk_pca":
        return run_gauss_pca(train, test, args.gauss_window)
    if method == "gauss_dk_tcnae":
        return run_gauss_tcn(train, test, args.gauss_window, args.tcn_epochs)
    from reveal.evaluate.labelled import run_reveal

    run = run_reveal(lm, settings)
    return Output(run.scores, run.flagged, {"preset": run.extra.get("preset")})


MEAN_KEYS = ("best_f1", "auprc", "auto_f1", "auto_precision", "auto_recall", "event_recall",
             "seconds")


def mean_of(rows: list[dict]) -> dict:
    """Mean over machines of each metric (None where no machine has it)."""
    out: dict = {}
    for key in MEAN_KEYS:
        vals = [r[key] for r in rows if r.get(key) is not None]
        out[key] = float(np.mean(vals)) if vals and len(vals) == len(rows) else None
    return out


def parse_set(items: list[str]) -> tuple[tuple[str, Any], ...]:
    """``NAME=VALUE`` pairs, each value read as JSON (else kept as a string)."""
    pairs = []
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"--set wants NAME=VALUE, got {item!r}")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        pairs.append((name, tuple(value) if isinstance(value, list) else value))
    return tuple(pairs)


def fmt(v: float | None) -> str:
    return "   -  " if v is None else f"{v:6.3f}"


def table(result: dict, methods: list[str], per_machine: bool) -> str:
    """Per-dataset means (and per machine) as a text table."""
    head = f"{'':28s} {'bestF1':>6s} {'AUPRC':>6s} {'autoF1':>6s} {'evRec':>6s} {'sec':>6s}"
    lines = []
    for dataset, block in result["datasets"].items():
        lines += [f"{dataset.upper()} ({block['n_machines']} machines), mean", head]
        for m in methods:
            r = block["mean"][m]
            lines.append(f"  {m:26s} {fmt(r['best_f1'])} {fmt(r['auprc'])} "
                         f"{fmt(r['auto_f1'])} {fmt(r['event_recall'])} {r['seconds']:6.1f}")
        if per_machine:
            for name, rows in block["machines"].items():
                lines.append(f" {name}")
                for m in methods:
                    r = rows[m]
                    lines.append(f"  {m:26s} {fmt(r['best_f1'])} {fmt(r['auprc'])} "
                                 f"{fmt(r['auto_f1'])} {fmt(r['event_recall'])} "
                                 f"{r['seconds']:6.1f}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from reveal.store.labelled import default_data_root, list_machines, load_machine

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="labelled data root (default: the nearest shared/data)")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--machines", nargs="+", help="only these machines")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--tcn-epochs", type=int, default=TCN_EPOCHS,
                        help="most TCN training epochs (early stopping on held-out train)")
    parser.add_argument("--gauss-window", type=int, default=GAUSS_WINDOW,
                        help="rows of the Gauss-D-K trailing window")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a Reveal analysis setting (repeatable; value read as JSON)")
    parser.add_argument("--per-machine", action="store_true", help="print every machine")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "anchors.json"))
    args = parser.parse_args(argv)

    root = Path(args.data) if args.data else default_data_root()
    if root is None or not any((root / d / "test").is_dir() for d in args.datasets):
        print(f"no labelled data found ({root or 'no data root'}); skipping", file=sys.stderr)
        return 0

    import torch
    from threadpoolctl import threadpool_limits

    from reveal.errors import InputError
    from reveal.evaluate.labelled import EvalSettings

    torch.set_num_threads(1)
    settings = EvalSettings(overrides=parse_set(args.set))
    try:
        settings.validate()
    except InputError as exc:
        print(f"--set: {exc}", file=sys.stderr)
        return 2
    methods = [m for m in METHODS if m in args.methods]
    say: Callable[[str], None] = (lambda _m: None) if args.quiet else (
        lambda m: print(m, file=sys.stderr, flush=True))

    started = time.monotonic()
    t_start = time.perf_counter()
    result: dict = {"datasets": {}}
    with threadpool_limits(1):
        for dataset in args.datasets:
            if not (root / dataset / "test").is_dir():
                say(f"{dataset}: absent, skipped")
                continue
            names = [m for m in list_machines(root, dataset)
                     if not args.machines or m in args.machines]
            machines: dict = {}
            for name in names:
                lm = load_machine(root, dataset, name)
                machines[name] = {}
                for method in methods:
                    t0 = time.perf_counter()
                    out = run_one(method, lm, args, settings)
                    row = score(lm.labels, out, time.perf_counter() - t0)
                    machines[name][method] = row
                    say(f"{dataset}/{name} {method}: best F1 {row['best_f1']:.3f} AUPRC "
                        f"{row['auprc']:.3f} auto F1 {fmt(row['auto_f1']).strip()} "
                        f"({row['seconds']:.1f} s)")
            if machines:
                result["datasets"][dataset] = {
                    "n_machines": len(machines), "machines": machines,
                    "mean": {m: mean_of([r[m] for r in machines.values()]) for m in methods}}

    result["methods"] = methods
    result["settings"] = {
        "reveal_overrides": {k: v for k, v in settings.overrides},
        "tcn_epochs": args.tcn_epochs, "gauss_window": args.gauss_window,
        "gauss_sigma": GAUSS_SIGMA, "auto_quantile": AUTO_QUANTILE, "fit_share": FIT_SHARE,
        "qv_components": QV_COMPONENTS, "pca_variance": PCA_VARIANCE}
    result["seconds_total"] = time.perf_counter() - t_start
    result["host"] = {"python": platform.python_version(), "machine": platform.machine(),
                      "torch": torch.__version__, "torch_threads": torch.get_num_threads()}
    out_path = Path(args.out)
    write_result(out_path, result,
                 {**arguments(args), "data_root": str(root),
                  "analysis": analysis_settings(dict(settings.overrides), interval_s=60.0),
                  "evaluation": dataclass_settings(settings), "anchors": result["settings"]},
                 script_argv(__file__, argv), started)
    print(table(result, methods, args.per_machine))
    print(f"{result['seconds_total']:.0f} s; wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
