"""CSV and labelled-data sources, and escaping of untrusted names."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.errors import InputError
from reveal.report.escape import html_text, markdown, plain
from reveal.store.csv_source import read_csv
from reveal.store.labelled import parse_interpretation
from reveal.store.sources import default_baseline, open_source


def test_csv_numeric_seconds_and_iso(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("time,a,b\n0.0,1,2\n0.1,3,\n0.2,5,6\n")
    tel = read_csv(path)
    assert tel.channels == ["a", "b"]
    np.testing.assert_array_equal(tel.timestamps_ns, [0, 100_000_000, 200_000_000])
    assert np.isnan(tel.values[1, 1])
    iso = tmp_path / "i.csv"
    iso.write_text("timestamp,x\n2026-01-01T00:00:00Z,1\n2026-01-01T00:00:01Z,2\n")
    assert np.diff(read_csv(iso).timestamps_ns).tolist() == [1_000_000_000]


@pytest.mark.parametrize(("text", "problem"), [
    ("time,a\n", "at least one"),
    ("time,a\n0,x\n1,y\n", "non-numeric"),
    ("time,a\n0,1\n0,2\n", "repeated timestamps"),
    ("time,a\n,1\n", "empty cells"),
])
def test_csv_bad_input_names_file_and_problem(tmp_path, text, problem):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=problem) as err:
        read_csv(path)
    assert "bad.csv" in str(err.value)


def test_open_source_errors(tmp_path):
    with pytest.raises(InputError, match="no such"):
        open_source(tmp_path / "missing")
    (tmp_path / "x.bin").write_bytes(b"\0")
    with pytest.raises(InputError, match="not a run directory"):
        open_source(tmp_path / "x.bin")
    assert default_baseline("smd:machine-1-2") == "smd:machine-1-2:train"
    assert default_baseline(str(tmp_path)) is None


def test_labelled_source_reads_smd(data_root):
    tel = open_source("smd:machine-1-2:train")
    assert tel.n_channels == 38 and tel.channels[0] == "smd.cpu_r"
    assert tel.interval_s == 60.0
    with pytest.raises(InputError, match="no smd machine"):
        open_source("smd:machine-9-9")


def test_interpretation_parsing():
    segs = parse_interpretation("15849-16368:1,9,10\n\n3-5:2\n")
    assert [(s.start, s.end, s.columns) for s in segs] == [(15849, 16368, [0, 8, 9]), (3, 5, [1])]
    with pytest.raises(InputError, match="line 1"):
        parse_interpretation("oops")


def test_escaping_untrusted_names():
    evil = "c|1`<script>\x1b[31m" + "x" * 300
    assert "\x1b" not in plain(evil) and len(plain(evil)) == 200
    md = markdown("a|b`c*")
    assert md == "a\\|b\\`c\\*"
    assert "<script>" not in html_text(evil) and "&lt;script&gt;" in html_text(evil)
