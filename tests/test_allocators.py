"""The watch's memory settings: an optional library left out of the process, as if it were
not installed, while every library the watch calls still works."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


def test_left_out_library_cannot_be_imported_and_the_rest_works():
    done = _run("""
        import sys
        from reveal.live.allocators import leave_out_unused
        assert leave_out_unused() == ["pandas"]
        import numpy as np, pyarrow as pa
        from sklearn.ensemble import IsolationForest
        x = np.random.default_rng(0).normal(size=(200, 3))
        scores = IsolationForest(random_state=0).fit(x).score_samples(x)
        assert pa.array(scores).null_count == 0
        try:
            import pandas  # noqa: F401
        except ModuleNotFoundError as exc:
            print("refused:", exc)
        assert "pandas" not in sys.modules or sys.modules["pandas"] is None
        print("maps pandas:", any("/pandas/" in line for line in open("/proc/self/maps")))
        """)
    assert done.returncode == 0, done.stderr
    assert "refused: No module named 'pandas'" in done.stdout
    assert "maps pandas: False" in done.stdout


def test_an_already_imported_library_is_kept():
    done = _run("""
        import pandas
        from reveal.live.allocators import leave_out_unused
        assert leave_out_unused() == []
        import pandas as again
        assert again is pandas
        """)
    assert done.returncode == 0, done.stderr
