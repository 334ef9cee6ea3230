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
