"""Every tunable of the analysis, with its default and unit."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class WindowConfig:
    """Sliding windows. By duration (seconds) for our runs, by rows for minute-level data."""

    size_s: float = 3.0
    stride_s: float = 1.0
    size_rows: int | None = None
    stride_rows: int | None = None


@dataclass(frozen=True)
class SelectConfig:
    prune: bool = True  # correlation pruning on the baseline before feature extraction
    corr_threshold: float = 0.5  # Pearson |r| above which two metrics are redundant
    min_std: float = 1e-12  # a channel with std below this is constant (never a representative)
    # a channel is redundant only with a kept channel of its own subsystem: available
    # memory that rose with a job's CPU use in the baseline still measures memory (off:
    # any kept channel can stand for it, as in the paper)
    same_subsystem: bool = True


@dataclass(frozen=True)
class DetectConfig:
    detectors: tuple[str, ...] = ("zscore", "pca_mahalanobis", "iforest", "gmm")
    threshold_quantile: float = 0.99  # baseline score quantile that flags a window
    # seconds the combined score must stay above the threshold before windows are flagged
    # (1 + floor(persistence_s / stride) consecutive windows; 0: every window on its own)
    persistence_s: float = 1.0
    pca_variance: float = 0.95  # share of variance the PCA subspace keeps
    # pca_error (PE): how many of the largest per-column errors are averaged (1: the max)
    pca_error_top: int = 1
    iforest_trees: int = 200
    gmm_max_components: int = 6
    random_state: int = 0
    # least change that counts (collector channels with units only; see
    # reveal.analysis.floors): a share of the channel's baseline level, and a burst of a
    # few counts for counters; scale_floors=False turns both off
    scale_floors: bool = True
    # a window is an anomaly only when some change in it also matters in its unit against
    # the host's capacity (reveal.analysis.significance); off: surprise alone decides
    significance: bool = True
    # with significance: only a window's median (and an event count's sum) can matter, so
    # that a change must last through most of a window (reveal.analysis.significance); off:
    # a burst shorter than half a window can be an anomaly too
    sustained: bool = True
    # with significance: a typical level's change is measured past the levels the baseline
    # itself reached (its 1st and 99th percentile windows), not from its median: a level
    # the baseline showed now and then is no change that matters (off: from the median)
    past_baseline: bool = True
    # seconds a changed level of a state-like gauge must hold still to be a new steady
    # state, named once instead of flagged (reveal.analysis.steady; 0: never adopted)
    settle_s: float = 300.0
    # with significance: a window whose change matters (past the baseline's own reach by the
    # least change that matters, in the direction that hurts, lasting through most of the
    # window) is an anomaly on its own; the detectors rank and attribute it. Off: it must
    # also be surprising to the detectors (above their threshold) or stand
    # significance.level_alone_z robust sigmas from the baseline
    matters_alone: bool = True
    # with significance: a level is judged averaged over the last lasting_s seconds of
    # windows too, against the baseline's own averages over as long: a fault that holds a
    # level the baseline reached only for a moment matters (reveal.analysis.lasting; 0: off)
    lasting_s: float = 30.0
    # the fewest lasting spans, end to end, a baseline must hold for lasting levels to be
    # judged (4 spans of 30 s: a baseline of 2 minutes; the watch's default learn holds 20)
    lasting_min_spans: int = 4
    # error and fault counts (catalog kind event, counted in whole events) judged by how
    # rare they were in the baseline (reveal.analysis.rare_events): a window holding at
    # least rare_event_least events, more than any baseline window held and no more likely
    # than rare_event_p under the baseline's count model shows a direct sign (one OOM kill
    # on a host that never had one)
    rare_events: bool = True
    rare_event_least: float = 1.0
    rare_event_p: float = 1e-6
    relative_floor: float = 0.05
    # the isolation forest sees floored columns rounded to whole floors (it is blind to
    # scale, so floors would otherwise not reach it)
    iforest_floor_grid: bool = True
    # shape features (skewness, kurtosis, autocorrelation, ADF) floored at their sampling
    # standard error over one window (with scale_floors)
    shape_floors: bool = True
    # mean, median, std, variance and slope floored at their sampling standard error over
    # one window, from the channel's within-window spread (with scale_floors)
    sampling_floors: bool = True
    # level features (mean, median, min, max) of ``state`` channels (free-list
    # fragmentation): off, only their changes within a window are evidence
    state_levels: bool = False
    # with scale floors: MAHA and GMM give every direction (a combination of columns, and
    # the residual off their subspace) at least one floor of spread, as the Z detector
    # and the forest's grid do for every column
    floor_directions: bool = True
    # the isolation forest's credits count in attributions on floored columns too (off:
    # there only Z, MAHA and GMM explain, whose explanations decompose their scores; on
    # the floor grid the forest isolates a rarely seen one-floor step at once and credits
    # it). The forest always counts in detection, explains unfloored data (SMD, ASD), and
    # explains when it is the only detector
    explain_forest: bool = False


@dataclass(frozen=True)
class SignificanceConfig:
    """What makes a change matter (``docs/detectors.md``, "The decision"). The least change
    of a channel that matters is a share of what the host or the job has (memory, CPUs, a
    link, a disk, a GPU, the job's own use), set at the fit; the z's are how far a change
    must also stand from the baseline's own spread, read when scoring. A fitted model keeps
    the values it was fitted with, so it scores the same whatever the code's defaults."""

    memory_share: float = 0.01  # of the host's memory (a cgroup's: of the job's own use)
    cpu_share: float = 0.05  # of all the host's CPUs, for host-wide CPU time
    one_cpu_share: float = 0.10  # of one CPU, for a per-CPU channel and an event's cost
    stall_share: float = 0.05  # of wall time stalled (pressure stall information)
    disk_share: float = 0.05  # of a device's time, throughput or operations per second
    link_share: float = 0.01  # of a link's (or a GPU's PCIe link's) bytes per second
    task_share: float = 0.5  # tasks per CPU (runnable, blocked), at least one task
    gpu_share: float = 0.05  # of a GPU's utilisation (points) and of its power limit
    gpu_memory_share: float = 0.01  # of a GPU's memory
    gpu_temp_c: float = 5.0  # degrees Celsius of a GPU's temperature
    clock_share: float = 0.05  # of the baseline's clock (MHz)
    socket_share: float = 0.05  # of the local ports a host can hold open at once
    # where a unit has no capacity here: a share of the channel's own baseline level (such
    # a change needs the detectors' surprise too)
    relative_share: float = 0.25
    job_share: float = 0.25  # of the job's own use, for a job-labelled channel
    # robust sigmas of the baseline a change that matters must also stand from its median
    significant_z: float = 3.0
    # with detect.matters_alone off: robust sigmas a level's change must stand from the
    # baseline to flag a window without the detectors' surprise
    level_alone_z: float = 8.0
    # baseline robust z (window means) a catalog sign must exceed besides its least value
    direct_z: float = 5.0
    direct_share: float = 0.5  # share of a window's evidence the direct signs take
    # share of the detectors' own evidence with which one subsystem keeps the lead over
    # signs that are only symptoms
    detector_lead: float = 0.5


#: The defaults a call given no model's settings uses (read at call time).
DEFAULT_SIGNIFICANCE = SignificanceConfig()


def significance_of(config: AnalyzeConfig | SignificanceConfig | None) -> SignificanceConfig:
    """The significance settings of ``config`` (a model's analysis settings, or the group
    itself); the code's defaults for None and for a model saved before the group."""
    if isinstance(config, SignificanceConfig):
        return config
    found = getattr(config, "significance", None)
    return found if isinstance(found, SignificanceConfig) else DEFAULT_SIGNIFICANCE


@dataclass(frozen=True)
class RefitConfig:
    """A baseline that keeps itself current: as scored data comes in
    (``Reveal.partial_fit``), with the ``"generations"`` scheme
    (:mod:`reveal.analysis.consensus`) a new model *generation* is fitted every
    ``every_s`` seconds of data on the recent windows that were not flagged; the newest
    ``generations`` are kept, and a window is flagged only when every one of them finds it
    above its own threshold. Nothing changes while no scored data is given back."""

    # "generations": the above. "quiet_span": every ``every_s``, a whole new model is
    # fitted on the raw samples of the latest ``span_s`` when no window in it was above
    # the threshold, and scores alone (reveal.analysis.quietspan; how ``reveal watch``
    # keeps its model current, with --refit-every and --learn)
    scheme: str = "generations"
    every_s: float | None = None  # seconds of scored data between refits (None: never)
    span_s: float = 86400.0  # a refit learns from the unflagged windows of this many seconds
    generations: int = 3  # generations kept; all must agree for a flag
    # the generation fitted on the baseline stays one of them (the consensus never flags
    # more than the baseline's model alone); off: it is dropped like any other
    keep_baseline: bool = True
    min_windows: int = 200  # fewest unflagged windows a refit needs (else it waits)
    # learn only from windows clearly normal: combined score at most this quantile of the
    # baseline generation's baseline combined scores (None: every unflagged window)
    learn_quantile: float | None = None


@dataclass(frozen=True)
class AnalyzeConfig:
    """The whole analysis. Settings that depend on the data's resolution come from a preset
    (see :mod:`reveal.analysis.presets`), chosen from the sampling interval."""

    preset: str = "telemetry"  # the preset these settings come from (or "custom")
    window: WindowConfig = field(default_factory=WindowConfig)
    select: SelectConfig = field(default_factory=SelectConfig)
    detect: DetectConfig = field(default_factory=DetectConfig)
    # what makes a change matter: shares of capacity and how far from the baseline
    significance: SignificanceConfig = field(default_factory=SignificanceConfig)
    # window features computed (None: every feature of docs/features.md)
    features: tuple[str, ...] | None = None
    # the feature centre follows this many seconds of past windows (None: the baseline
    # median is the centre), updated every drift_block_s seconds; causal, but on a scored
    # run it follows that run's own past windows
    drift_window_s: float | None = None
    drift_block_s: float = 3600.0
    # per-CPU channels by rank (busiest CPU of the window first) instead of by CPU number,
    # so a job the scheduler moved to another CPU is not an anomaly
    rank_cpus: bool = True
    # with rank_cpus: rank the CPUs in every sample, not only in every window, so a job
    # moved to the other CPU for part of a window is not a change either (off: see
    # docs/detectors.md for what it did to the validation figures)
    rank_cpu_samples: bool = False
    top_reasons: int = 5  # metric-feature pairs kept per anomaly
    # without a baseline (fitted on the run itself), the combined threshold is at least
    # median + this many robust sigmas of the run's own combined scores (None: the
    # baseline quantile only)
    self_fit_threshold_mads: float | None = 5.0
    # with a baseline: its windows that most detectors score more than this many robust
    # sigmas above the median of their own (held-out) baseline scores (bursts inside the
    # baseline) are left out and the detectors refitted on the rest, so a burst within the
    # baseline does not raise the thresholds (None: every baseline window is kept; the
    # watch learns with 12, reveal.live.keeper.LEARN_SETTINGS)
    baseline_trim_mads: float | None = None
    # a baseline shorter than this many windows is named in the report as too short
    min_baseline_windows: int = 60
    # a baseline whose level of a channel with a healthy range (the catalog's ``healthy``)
    # lies outside that range in more than this share of its windows is named unhealthy
    # in the model and the report (reveal.analysis.baseline_health): far more than the
    # 1 % the thresholds leave above them, so the fault's level is part of what was
    # learned as normal (an entry's own ``share`` wins; None: no check)
    baseline_unhealthy_share: float | None = 0.25
    # periodic refits on recent unflagged windows and the consensus of model generations
    refit: RefitConfig = field(default_factory=RefitConfig)
    # more window sizes (rows; with windows by rows) scored beside window.size_rows, each
    # by an analysis of its own: a window's combined score is the mean over the sizes of
    # score / threshold (threshold 1); a window is flagged where the main size flags it,
    # or another size does and that mean is above 1 (see reveal.analysis.scales)
    extra_window_rows: tuple[int, ...] = ()
