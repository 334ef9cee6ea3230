"""reveal.report.figures leaves the process's matplotlib backend alone and still writes PNGs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

PNG = b"\x89PNG\r\n\x1a\n"

# A caller that chose its own backend (svg) imports the figures module, then draws the two
# report-level figures from real arrays; it prints what it saw.
SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from types import SimpleNamespace as NS

    import matplotlib
    import numpy as np

    matplotlib.use("svg")
    before = matplotlib.get_backend()
    from reveal.report import figures

    after_import = matplotlib.get_backend()
    out = Path(sys.argv[1])
    S = 1_000_000_000
    start = np.arange(20, dtype=np.int64) * S
    score = np.r_[np.zeros(15), np.full(5, 4.0)]
    flags = score > 1.0
    windows = NS(start_ns=start, end_ns=start + 3 * S, scores={"zscore": score},
                 flags={"zscore": flags}, combined=score, flagged=flags)
    report = NS(windows=windows, run={"start_ns": 0},
                detectors=[NS(name="zscore", threshold=1.0)],
                anomalies=[NS(subsystems=["cpu"]), NS(subsystems=["network", "cpu"])])
    figures.detector_timeline(report, out / "timeline.png")
    figures.subsystem_counts(report, out / "subsystems.png")
    print(before, after_import, matplotlib.get_backend(), "matplotlib.pyplot" in sys.modules)
    """
)


def test_import_keeps_the_backend_and_figures_are_written(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    before, after_import, after_drawing, pyplot_loaded = done.stdout.split()
    assert before == "svg"
    assert after_import == "svg" and after_drawing == "svg"
    assert pyplot_loaded == "False"  # pyplot's global figure registry is not involved
    for name in ("timeline.png", "subsystems.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG), name
        assert len(data) > 5000, (name, len(data))


def _timeline_report(wall_offset_ns: int):
    from types import SimpleNamespace as NS

    import numpy as np

    s = 1_000_000_000
    start = 50 * s + np.arange(40, dtype=np.int64) * s
    score = np.r_[np.zeros(20), np.full(5, 6.0), np.zeros(15)]
    flags = score > 4.0
    windows = NS(start_ns=start, end_ns=start + 3 * s, scores={"Z": score, "IF": score / 2},
                 flags={"Z": flags, "IF": flags}, combined=score, flagged=flags)
    return NS(windows=windows, run={"start_ns": 50 * s, "wall_offset_ns": wall_offset_ns},
              detectors=[NS(name="Z", threshold=1.0), NS(name="IF", threshold=0.5)],
              decision={"combined_threshold": 4.0}, anomalies=[], episodes=[])


def test_timeline_draws_the_combined_threshold_and_labels_every_axis() -> None:
    import numpy as np

    from reveal.report import figures

    fig = figures.timeline_figure(_timeline_report(1_700_000_000 * 10**9))
    *rows, bottom = fig.axes
    assert "combined score" in bottom.get_ylabel() and "surprise" in bottom.get_ylabel()
    thresholds = [line for line in bottom.get_lines()
                  if np.allclose(np.asarray(line.get_ydata(), dtype=float), 4.0)]
    assert thresholds, "the combined threshold is drawn as a line"
    assert bottom.patches, "flagged windows are shaded"
    assert bottom.get_xlabel() == "time (UTC)"
    assert all(ax.get_ylabel() for ax in fig.axes)
    assert [ax.get_ylabel() for ax in rows] == ["Z score", "IF score"]
    relative = figures.timeline_figure(_timeline_report(0))
    assert relative.axes[-1].get_xlabel() == "time since run start (s)"


def test_trace_axes_carry_the_channels_units() -> None:
    from types import SimpleNamespace as NS

    import numpy as np

    from reveal.report import figures

    s = 1_000_000_000
    channels = ["derived.disk_read_bytes_per_s{dev=vda}", "cpu.user{cpu=1}", "smd.disk_q"]
    ts = np.arange(600, dtype=np.int64) * s // 10
    values = np.column_stack([np.full(600, 4e8), np.full(600, 50.0), np.full(600, 0.2)])
    telemetry = NS(channels=channels, values=values, timestamps_ns=ts)
    reasons = [NS(channel=c, contribution=w) for c, w in zip(channels, (0.5, 0.3, 0.2),
                                                              strict=True)]
    report = NS(run={"start_ns": 0, "wall_offset_ns": 0},
                windows=NS(start_ns=ts[::10], end_ns=ts[::10] + 3 * s),
                episodes=[NS(start_ns=20 * s, end_ns=25 * s, window_ids=[20], peak_score=5.0,
                             subsystem="storage")],
                anomalies=[NS(window_id=20, reasons=reasons)])
    [(_, fig)] = figures.trace_figures(report, telemetry)
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels == ["bytes/s", "% of one CPU", "value (no unit)"]
    assert fig.axes[0].yaxis.get_major_formatter()(4e8, 0) == "400 MB/s"
    assert fig.axes[1].get_lines()[0].get_ydata()[0] == 50.0  # 50 ticks/s: half a CPU
    assert fig.axes[-1].get_xlabel() == "time since run start (s)"
