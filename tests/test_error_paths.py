"""Every user-facing error path of the ``reveal`` command line, run for real.

Each case runs the command line's entry point (:func:`reveal.cli.main`) on real inputs (a
run the real collector recorded, files made broken on purpose, a read-only bind mount, a
full tmpfs, /proc, a path under a regular file...) and checks what a user sees: exit code
2, exactly one line on stderr naming the problem, and no traceback. Every case runs in this
process (its working directory and environment set as a shell would); every
:data:`SUBPROCESS_EVERY`-th case also runs as ``python -m reveal.cli`` in a subprocess, so
what only a fresh interpreter shows (its imports, its exit code, its stderr) is checked too.
The cases are parametrised by name, so ``pytest -v`` lists them and the count of paths
covered.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def _reveal(*args: str, cwd: Path, env: dict[str, str] | None = None,
            python: tuple[str, ...] = (sys.executable,),
            timeout: float = 180) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([*python, "-m", "reveal.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, env=full_env, check=False)


def _reveal_here(*args: str, cwd: Path, env: dict[str, str] | None,
                 monkeypatch: pytest.MonkeyPatch) -> subprocess.CompletedProcess[str]:
    """:func:`reveal.cli.main` run in this process as ``reveal ARGS`` would run from ``cwd``
    with ``env`` added to the environment: its exit code, stdout and stderr."""
    from reveal import cli

    monkeypatch.chdir(cwd)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(args))
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 1
        except Exception:  # a traceback is what the user would see
            import traceback

            traceback.print_exc()
            code = 1
    return subprocess.CompletedProcess(["reveal", *args], code, out.getvalue(), err.getvalue())


def _csv(path: Path, header: str, rows: list[str]) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def _series(column: str, n: int = 120, offset: float = 0.0) -> list[str]:
    return [f"{t},{offset + (t % 7) * 1.5 + (t % 3)}" for t in range(n)]


# -- the places the cases write to or read from ----------------------------------------------
@dataclass
class Places:
    """Real inputs and unwritable outputs, made once for the module."""

    root: Path
    run: Path  # a run the real collector recorded
    readonly: Path | None = None  # a read-only bind mount (root only)
    full: Path | None = None  # a tmpfs with no space left (root only)
    mounts: list[Path] = field(default_factory=list)

    def p(self, name: str) -> Path:
        return self.root / name


def _mount(*argv: str) -> bool:
    return subprocess.run(["mount", *argv], capture_output=True, check=False).returncode == 0


def _make_places(root: Path) -> Places:
    run = root / "run"
    done = _reveal("collect", "--duration", "1.5", "--interval", "0.25", "--quiet",
                   "--out", str(run), cwd=root)
    assert done.returncode == 0, done.stderr
    places = Places(root, run)

    # a copy of the run whose Parquet segment is cut short
    truncated = root / "truncated-run"
    shutil.copytree(run, truncated)
    segments = sorted((truncated / "segments").glob("*.parquet"))
    assert segments, "the recorded run has no Parquet segment"
    for segment in segments:
        data = segment.read_bytes()
        segment.write_bytes(data[: len(data) // 3])
    shutil.rmtree(truncated / "journal", ignore_errors=True)
    (truncated / "journal").mkdir()

    for name, text in (("garbage-meta", "{not json"), ("foreign-meta", '{"format": "x"}'),
                       ("future-meta", json.dumps({"format": "reveal-run", "version": 99}))):
        (root / name).mkdir()
        (root / name / "meta.json").write_text(text, encoding="utf-8")
    (root / "no-meta").mkdir()
    (root / "no-meta" / "data.txt").write_text("x\n", encoding="utf-8")

    p = places.p
    p("a-file").write_text("not a directory\n", encoding="utf-8")
    p("garbage.csv").write_bytes(bytes(range(256)) * 8)
    _csv(p("header-only.csv"), "time,cpu", [])
    _csv(p("one-row.csv"), "time,cpu", ["0,1.0"])
    _csv(p("text-values.csv"), "time,cpu", ["0,high", "1,low"])
    _csv(p("repeated-time.csv"), "time,cpu", ["0,1", "0,2", "1,3"])
    _csv(p("empty-time.csv"), "time,cpu", ["0,1", ",2", "2,3"])
    _csv(p("bad-time.csv"), "time,cpu", ["2024-05-01T10:00:00,1", "monday,2"])
    _csv(p("run.csv"), "time,cpu.busy", _series("cpu.busy"))
    _csv(p("other.csv"), "time,disk.queue", _series("disk.queue", offset=3.0))
    p("garbage-metrics.json").write_text("{{{", encoding="utf-8")
    p("garbage.model").write_text("not a model\n", encoding="utf-8")
    p("foreign-metrics.json").write_text('{"format": "other"}', encoding="utf-8")
    p("bad.toml").write_text("[collect\ninterval = \n", encoding="utf-8")
    p("unknown-table.toml").write_text("[collector]\ninterval = 0.1\n", encoding="utf-8")
    p("unknown-option.toml").write_text("[collect]\nspeed = 3\n", encoding="utf-8")
    p("probes-not-tables.toml").write_text("[probes]\ncgroup = 1\n", encoding="utf-8")

    # a labelled-data root whose one machine is broken in several ways
    for part in ("train", "test", "test_label"):
        (root / "data" / "smd" / part).mkdir(parents=True)
    (root / "data" / "smd" / "test" / "no-train.txt").write_text("1,2\n3,4\n")
    (root / "data" / "smd" / "test" / "garbage.txt").write_text("1,2\n3,4\n")
    (root / "data" / "smd" / "train" / "garbage.txt").write_text("a,b\nc\n")
    (root / "data" / "smd" / "test" / "mislabelled.txt").write_text("1,2\n3,4\n5,6\n")
    (root / "data" / "smd" / "train" / "mislabelled.txt").write_text("1,2\n3,4\n5,6\n")
    (root / "data" / "smd" / "test_label" / "mislabelled.txt").write_text("0\n1\n")
    (root / "empty-data" / "asd").mkdir(parents=True)

    # a demo directory holding something the demo did not write
    (root / "foreign-demo").mkdir()
    (root / "foreign-demo" / "notes.txt").write_text("mine\n", encoding="utf-8")

    # a reanalyse directory with no recorded runs, one with a run but no baseline
    (root / "no-runs").mkdir()
    (root / "no-baseline" / "runs" / "single" / "run1").mkdir(parents=True)

    # a run directory whose metadata is fine but which holds no samples
    (root / "no-samples").mkdir()
    shutil.copy2(run / "meta.json", root / "no-samples" / "meta.json")

    if os.geteuid() == 0:
        source = root / "ro-source"
        source.mkdir()
        target = root / "readonly"
        target.mkdir()
        if _mount("--bind", str(source), str(target)):
            places.mounts.append(target)
            if _mount("-o", "remount,bind,ro", str(target)):
                places.readonly = target
        full = root / "full"
        full.mkdir()
        if _mount("-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)):
            places.mounts.append(full)
            try:
                with open(full / "filler", "wb") as handle:
                    while True:
                        handle.write(b"\0" * 4096)
                        handle.flush()
            except OSError:
                pass
            places.full = full
    return places


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Places]:
    made = _make_places(tmp_path_factory.mktemp("errors"))
    try:
        yield made
    finally:
        for mount in reversed(made.mounts):
            subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


# -- the cases ---------------------------------------------------------------------------------
@dataclass
class Case:
    name: str
    argv: Callable[[Places], list[str]]
    expect: str  # part of the one line on stderr
    needs: str = ""  # "readonly" or "full": a mount made as root
    env: Callable[[Places], dict[str, str]] | None = None
    after: Callable[[Places], None] | None = None  # more checks once it has failed


def _untouched(path: str) -> Callable[[Places], None]:
    def check(places: Places) -> None:
        assert not places.p(path).exists(), f"{path} was created: the work began anyway"
    return check


def _run_again(places: Places) -> None:
    assert (places.run / "meta.json").is_file()


S = str
CASES = [
    # analyze: inputs
    Case("analyze-missing-run", lambda p: ["analyze", S(p.p("nowhere")), "--quiet"],
         "no such run directory or file"),
    Case("analyze-not-a-run", lambda p: ["analyze", S(p.p("a-file")), "--quiet"],
         "not a run directory, CSV file"),
    Case("analyze-dir-without-meta", lambda p: ["analyze", S(p.p("no-meta")), "--quiet"],
         "no meta.json"),
    Case("analyze-garbage-meta", lambda p: ["analyze", S(p.p("garbage-meta")), "--quiet"],
         "unreadable metadata"),
    Case("analyze-foreign-meta", lambda p: ["analyze", S(p.p("foreign-meta")), "--quiet"],
         "metadata file"),
    Case("analyze-future-format", lambda p: ["analyze", S(p.p("future-meta")), "--quiet"],
         "run format version"),
    Case("analyze-run-without-samples",
         lambda p: ["analyze", S(p.p("no-samples")), "--quiet"], "no samples"),
    Case("analyze-truncated-segment",
         lambda p: ["analyze", S(p.p("truncated-run")), "--quiet"], "Parquet segment"),
    Case("analyze-garbage-csv", lambda p: ["analyze", S(p.p("garbage.csv")), "--quiet"],
         "garbage.csv"),
    Case("analyze-header-only-csv",
         lambda p: ["analyze", S(p.p("header-only.csv")), "--quiet"], "one row"),
    Case("analyze-one-row-csv", lambda p: ["analyze", S(p.p("one-row.csv")), "--quiet"],
         "sampling interval"),
    Case("analyze-text-values-csv",
         lambda p: ["analyze", S(p.p("text-values.csv")), "--quiet"], "non-numeric"),
    Case("analyze-repeated-times-csv",
         lambda p: ["analyze", S(p.p("repeated-time.csv")), "--quiet"], "repeated timestamps"),
    Case("analyze-empty-time-csv",
         lambda p: ["analyze", S(p.p("empty-time.csv")), "--quiet"], "empty cells"),
    Case("analyze-bad-time-csv", lambda p: ["analyze", S(p.p("bad-time.csv")), "--quiet"],
         "neither numeric nor ISO 8601"),
    Case("analyze-missing-baseline",
         lambda p: ["analyze", S(p.run), "--baseline", S(p.p("nowhere")), "--quiet"],
         "no such run directory or file"),
    Case("analyze-baseline-no-common-channel",
         lambda p: ["analyze", S(p.p("run.csv")), "--baseline", S(p.p("other.csv")),
                    "--quiet"], "in common"),
    Case("analyze-unknown-detector",
         lambda p: ["analyze", S(p.p("run.csv")), "--detectors", "zscore,crystal_ball",
                    "--quiet"],
         "unknown detector 'crystal_ball'"),
    Case("analyze-no-detector", lambda p: ["analyze", S(p.p("run.csv")), "--detectors",
                                           ",", "--quiet"], "no detector"),
    Case("analyze-quantile-out-of-range",
         lambda p: ["analyze", S(p.p("run.csv")), "--quantile", "1.5", "--quiet"],
         "quantile"),
    Case("analyze-garbage-metric-set",
         lambda p: ["analyze", S(p.run), "--metrics", S(p.p("garbage-metrics.json")),
                    "--quiet"], "unreadable metric-set file"),
    Case("analyze-foreign-metric-set",
         lambda p: ["analyze", S(p.run), "--metrics", S(p.p("foreign-metrics.json")),
                    "--quiet"], "metric-set"),
    Case("analyze-missing-metric-set",
         lambda p: ["analyze", S(p.run), "--metrics", S(p.p("nowhere.json")), "--quiet"],
         "unreadable metric-set file"),
    Case("analyze-garbage-model",
         lambda p: ["analyze", S(p.p("run.csv")), "--model", S(p.p("garbage.model")),
                    "--quiet"], "not a Reveal model file"),
    Case("analyze-model-with-settings",
         lambda p: ["analyze", S(p.p("run.csv")), "--model", S(p.p("garbage.model")),
                    "--window", "5", "--quiet"], "saved model's own settings"),
    Case("analyze-save-model-readonly",
         lambda p: ["analyze", S(p.p("run.csv")), "--save-model", S(p.readonly / "m"),
                    "--quiet"], "Read-only file system", needs="readonly"),
    # analyze: labelled data
    Case("analyze-labelled-no-data-root",
         lambda p: ["analyze", "smd:machine-1-1", "--quiet"], "labelled data not found",
         env=lambda p: {"REVEAL_DATA": S(p.p("nowhere"))}),
    Case("analyze-labelled-unknown-machine",
         lambda p: ["analyze", "smd:machine-9-9", "--quiet"], "no smd machine named",
         env=lambda p: {"REVEAL_DATA": S(p.p("data"))}),
    Case("analyze-labelled-bad-part",
         lambda p: ["analyze", "smd:garbage:validation", "--quiet"], "part must be",
         env=lambda p: {"REVEAL_DATA": S(p.p("data"))}),
    Case("analyze-labelled-missing-train",
         lambda p: ["analyze", "smd:no-train", "--quiet"], "no train file",
         env=lambda p: {"REVEAL_DATA": S(p.p("data"))}),
    Case("analyze-labelled-garbage-file",
         lambda p: ["analyze", "smd:garbage", "--quiet"], "unreadable data",
         env=lambda p: {"REVEAL_DATA": S(p.p("data"))}),
    Case("analyze-labelled-label-count",
         lambda p: ["analyze", "smd:mislabelled", "--quiet"], "labels for 3 test rows",
         env=lambda p: {"REVEAL_DATA": S(p.p("data"))}),
    # analyze: the report file, checked before the analysis
    Case("analyze-json-readonly",
         lambda p: ["analyze", S(p.run), "--json", S(p.readonly / "r.json"), "--quiet"],
         "Read-only file system", needs="readonly"),
    Case("analyze-json-full-disk",
         lambda p: ["analyze", S(p.run), "--json", S(p.full / "r.json"), "--quiet"],
         "no space left", needs="full"),
    Case("analyze-json-under-a-file",
         lambda p: ["analyze", S(p.run), "--json", S(p.p("a-file") / "r.json"), "--quiet"],
         "is not a directory"),
    Case("analyze-json-in-proc",
         lambda p: ["analyze", S(p.run), "--json", "/proc/reveal-report.json", "--quiet"],
         "/proc"),
    Case("analyze-json-is-a-directory",
         lambda p: ["analyze", S(p.run), "--json", S(p.root), "--quiet"], "is a directory"),
    Case("analyze-json-missing-directory",
         lambda p: ["analyze", S(p.run), "--json", S(p.p("nowhere") / "r.json"), "--quiet"],
         "no such directory"),
    Case("analyze-json-device-full",
         lambda p: ["analyze", S(p.p("run.csv")), "--json", "/dev/full", "--format", "none",
                    "--quiet"], "No space left on device"),
    # collect
    Case("collect-run-already-there",
         lambda p: ["collect", "--duration", "1", "--quiet", "--out", S(p.run)],
         "already holds a run", after=_run_again),
    Case("collect-out-not-empty",
         lambda p: ["collect", "--duration", "1", "--quiet", "--out", S(p.p("no-meta"))],
         "not empty"),
    Case("collect-out-is-a-file",
         lambda p: ["collect", "--duration", "1", "--quiet", "--out", S(p.p("a-file"))],
         "not a directory"),
    Case("collect-out-under-a-file",
         lambda p: ["collect", "--duration", "1", "--quiet", "--out",
                    S(p.p("a-file") / "run")], "is not a directory"),
    Case("collect-out-readonly",
         lambda p: ["collect", "--duration", "1", "--quiet", "--out", S(p.readonly / "run")],
         "Read-only file system", needs="readonly"),
    Case("collect-out-full-disk",
         lambda p: ["collect", "--duration", "1", "--quiet", "--out", S(p.full / "run")],
         "no space left", needs="full"),
    Case("collect-out-in-proc",
         lambda p: ["collect", "--duration", "1", "--quiet", "--out", "/proc/reveal-run"],
         "/proc"),
    Case("collect-unknown-probe",
         lambda p: ["collect", "--duration", "1", "--quiet", "--probes", "cpu,tachyon",
                    "--out", S(p.p("never-1"))], "unknown probe 'tachyon'",
         after=_untouched("never-1")),
    Case("collect-exclude-unknown-probe",
         lambda p: ["collect", "--duration", "1", "--quiet", "--exclude", "warp_drive",
                    "--out", S(p.p("never-15"))], "unknown probe 'warp_drive'",
         after=_untouched("never-15")),
    Case("collect-probe-option-shape",
         lambda p: ["collect", "--duration", "1", "--quiet", "--probe-option", "gpu=false",
                    "--out", S(p.p("never-2"))], "PROBE.KEY=VALUE",
         after=_untouched("never-2")),
    Case("collect-probe-option-unknown-probe",
         lambda p: ["collect", "--duration", "1", "--quiet", "--probe-option",
                    "tachyon.speed=3", "--out", S(p.p("never-3"))], "unknown probe 'tachyon'"),
    Case("collect-probe-option-unknown-key",
         lambda p: ["collect", "--duration", "1", "--quiet", "--probe-option",
                    "gpu.warp_speed=3", "--out", S(p.p("never-4"))], "no option 'warp_speed'"),
    Case("collect-interval-zero",
         lambda p: ["collect", "--duration", "1", "--quiet", "--interval", "0",
                    "--out", S(p.p("never-5"))], "--interval must be positive"),
    Case("collect-refresh-negative",
         lambda p: ["collect", "--duration", "1", "--quiet", "--refresh", "-1",
                    "--out", S(p.p("never-6"))], "--refresh must be positive"),
    Case("collect-duration-zero",
         lambda p: ["collect", "--duration", "0", "--quiet", "--out", S(p.p("never-7"))],
         "--duration must be positive"),
    Case("collect-segment-too-short",
         lambda p: ["collect", "--duration", "1", "--quiet", "--segment-seconds", "0.5",
                    "--out", S(p.p("never-8"))], "--segment-seconds"),
    Case("collect-config-missing",
         lambda p: ["collect", "--config", S(p.p("nowhere.toml")), "--quiet"],
         "cannot read the configuration"),
    Case("collect-config-not-toml",
         lambda p: ["collect", "--config", S(p.p("bad.toml")), "--quiet"], "not valid TOML"),
    Case("collect-config-unknown-table",
         lambda p: ["collect", "--config", S(p.p("unknown-table.toml")), "--quiet"],
         "unknown table"),
    Case("collect-config-unknown-option",
         lambda p: ["collect", "--config", S(p.p("unknown-option.toml")), "--quiet"],
         "has no option 'speed'"),
    Case("collect-config-probes-not-tables",
         lambda p: ["collect", "--config", S(p.p("probes-not-tables.toml")), "--quiet"],
         "[probes.NAME]"),
    # profile
    Case("profile-no-command", lambda p: ["profile", "--quiet", "--out", S(p.p("never-9"))],
         "no command given"),
    Case("profile-command-not-found",
         lambda p: ["profile", "--quiet", "--no-analyze", "--out", S(p.p("never-10")), "--",
                    S(p.p("no-such-program"))], "cannot run"),
    Case("profile-out-readonly",
         lambda p: ["profile", "--quiet", "--out", S(p.readonly / "run"), "--",
                    "touch", S(p.p("profiled-command-ran"))], "Read-only file system",
         needs="readonly", after=_untouched("profiled-command-ran")),
    Case("profile-run-already-there",
         lambda p: ["profile", "--quiet", "--out", S(p.run), "--",
                    "touch", S(p.p("profiled-command-ran-2"))], "already holds a run",
         after=_untouched("profiled-command-ran-2")),
    # select
    Case("select-missing-run", lambda p: ["select", S(p.p("nowhere")),
                                          "--out", S(p.p("m.json"))],
         "no such run directory or file"),
    Case("select-out-under-a-file",
         lambda p: ["select", S(p.run), "--out", S(p.p("a-file") / "m.json")],
         "is not a directory"),
    Case("select-out-readonly",
         lambda p: ["select", S(p.run), "--out", S(p.readonly / "m.json")],
         "Read-only file system", needs="readonly"),
    Case("select-curves-in-proc",
         lambda p: ["select", S(p.run), "--out", S(p.p("m2.json")), "--curves",
                    "/proc/reveal-curves.json"], "/proc"),
    Case("select-threshold-out-of-range",
         lambda p: ["select", S(p.p("run.csv")), "--threshold", "0",
                    "--out", S(p.p("m3.json"))], "correlation threshold"),
    # evaluate
    Case("evaluate-no-data-root", lambda p: ["evaluate", "--data", S(p.p("nowhere")),
                                             "--quiet"], "no labelled data found"),
    Case("evaluate-dataset-missing",
         lambda p: ["evaluate", "--data", S(p.p("empty-data")), "--datasets", "smd",
                    "--quiet"], "no smd data"),
    Case("evaluate-no-such-machine",
         lambda p: ["evaluate", "--data", S(p.p("data")), "--datasets", "smd",
                    "--machines", "machine-9-9", "--quiet"], "none of the machines"),
    Case("evaluate-broken-machine-file",
         lambda p: ["evaluate", "--data", S(p.p("data")), "--datasets", "smd",
                    "--machines", "garbage", "--quiet"], "unreadable data"),
    Case("evaluate-json-readonly",
         lambda p: ["evaluate", "--data", S(p.p("data")), "--json", S(p.readonly / "e.json"),
                    "--quiet"], "Read-only file system", needs="readonly"),
    # validate
    Case("validate-repetitions-zero",
         lambda p: ["validate", "--repetitions", "0", "--out", S(p.p("never-11")),
                    "--quiet"], "--repetitions must be at least 1"),
    Case("validate-unknown-fault",
         lambda p: ["validate", "--faults", "meteor_strike", "--out", S(p.p("never-12")),
                    "--quiet"], "unknown fault"),
    Case("validate-no-intensity",
         lambda p: ["validate", "--faults", "cpu_contention", "--intensities", "extreme",
                    "--out", S(p.p("never-13")), "--quiet"], "intensities"),
    Case("validate-out-under-a-file",
         lambda p: ["validate", "--quick", "--out", S(p.p("a-file") / "v"), "--quiet"],
         "is not a directory"),
    Case("validate-out-full-disk",
         lambda p: ["validate", "--quick", "--out", S(p.full / "v"), "--quiet"],
         "no space left", needs="full"),
    Case("validate-reanalyse-nothing-recorded",
         lambda p: ["validate", "--reanalyse", S(p.p("no-runs")), "--quiet"],
         "no recorded runs here"),
    Case("validate-reanalyse-run-without-baseline",
         lambda p: ["validate", "--reanalyse", S(p.p("no-baseline")), "--quiet"],
         "no baseline for run1"),
    # watch (every one before recording or listening starts)
    Case("watch-state-under-a-file",
         lambda p: ["watch", "--state", S(p.p("a-file") / "state"), "--quiet"],
         "state directory is not writable"),
    Case("watch-state-readonly",
         lambda p: ["watch", "--state", S(p.readonly / "state"), "--quiet"],
         "state directory is not writable", needs="readonly"),
    Case("watch-learn-too-short",
         lambda p: ["watch", "--state", S(p.p("watch-1")), "--learn", "5s", "--quiet"],
         "too short"),
    Case("watch-bad-listen",
         lambda p: ["watch", "--state", S(p.p("watch-2")), "--listen", "nonsense",
                    "--quiet"], "expected HOST:PORT"),
    Case("watch-resolve-after-zero",
         lambda p: ["watch", "--state", S(p.p("watch-3")), "--resolve-after", "0",
                    "--quiet"], "--resolve-after must be positive"),
    Case("watch-webhook-not-http",
         lambda p: ["watch", "--state", S(p.p("watch-4")), "--listen", "127.0.0.1:0",
                    "--alert-webhook", "ftp://alerts", "--quiet"], "http:// or https://"),
    # demo
    Case("demo-too-short", lambda p: ["demo", "--duration", "10", "--out", S(p.p("never-14")),
                                      "--quiet"], "at least 30 seconds"),
    Case("demo-out-is-a-file", lambda p: ["demo", "--out", S(p.p("a-file")), "--quiet"],
         "not a directory"),
    Case("demo-out-readonly", lambda p: ["demo", "--out", S(p.readonly / "d"), "--quiet"],
         "Read-only file system", needs="readonly"),
    Case("demo-out-full-disk", lambda p: ["demo", "--out", S(p.full / "d"), "--quiet"],
         "no space left", needs="full"),
    Case("demo-force-over-foreign-files",
         lambda p: ["demo", "--force", "--out", S(p.p("foreign-demo")), "--quiet"],
         "did not write",
         after=lambda p: (p.p("foreign-demo") / "notes.txt").is_file() or pytest.fail(
             "demo --force removed a file it did not write")),
    # compare
    Case("compare-repro-one-run", lambda p: ["compare", "repro", S(p.run)],
         "at least two runs"),
    Case("compare-windows-missing-run",
         lambda p: ["compare", "windows", S(p.p("nowhere"))], "no such run directory"),
    # trace
    Case("trace-duration-zero", lambda p: ["trace", "--duration", "0"],
         "--duration must be positive"),
    Case("trace-bad-pid", lambda p: ["trace", "--pid", "twelve", "--duration", "1"], "--pid"),
    Case("trace-unknown-capture-group",
         lambda p: ["trace", "--chrome-trace", S(p.p("t.json")), "--groups", "telepathy"],
         "unknown capture groups"),
    Case("trace-event-limit-zero",
         lambda p: ["trace", "--chrome-trace", S(p.p("t.json")), "--max-events", "0"],
         "event limit must be positive"),
]


#: every n-th case also runs in a subprocess (a fresh interpreter, as a user runs it)
SUBPROCESS_EVERY = 8
WAYS = [pytest.param(case, "here", id=f"{case.name}-here") for case in CASES] + [
    pytest.param(case, "subprocess", id=f"{case.name}-subprocess")
    for case in CASES[::SUBPROCESS_EVERY]]


@pytest.mark.parametrize(("case", "way"), WAYS)
def test_error_path_is_one_line_and_exit_2(case: Case, way: str, places: Places,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    if case.needs and getattr(places, case.needs) is None:
        pytest.skip(f"needs a {case.needs} mount (root and mount(8))")
    env = case.env(places) if case.env else None
    if way == "here":
        done = _reveal_here(*case.argv(places), cwd=places.root, env=env,
                            monkeypatch=monkeypatch)
    else:
        done = _reveal(*case.argv(places), cwd=places.root, env=env)
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("reveal "), lines[0]
    assert ": error: " in lines[0], lines[0]
    assert case.expect in lines[0], lines[0]
    if case.after is not None:
        case.after(places)


def test_error_path_count() -> None:
    """The number of distinct error paths covered (their names are unique)."""
    assert len({c.name for c in CASES}) == len(CASES) >= 80


# -- the installation itself: a command that cannot load, a package that is missing -----------
def test_command_that_cannot_load_is_listed_and_names_the_module(tmp_path: Path) -> None:
    """A copy of the package with one module removed (a broken installation): --help still
    works and lists every command (building the parser loads no command's work); running
    the command that needs the module says, in one line, which module is missing."""
    shutil.copytree(SRC / "reveal", tmp_path / "reveal",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "reveal" / "report" / "escape.py").unlink()
    env = {"PYTHONPATH": str(tmp_path)}
    listed = _reveal("--help", cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr
    assert "probes" in listed.stdout and "unavailable" not in listed.stdout
    assert _reveal("probes", "--help", cwd=tmp_path, env=env).returncode == 0
    done = _reveal("probes", cwd=tmp_path, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "reveal.commands.probes" in done.stderr and "reveal.report.escape" in done.stderr
    others = _reveal("collect", "--duration", "0", "--quiet", cwd=tmp_path, env=env)
    assert "--duration must be positive" in others.stderr  # the other commands still work


def test_missing_third_party_package_names_it(tmp_path: Path) -> None:
    """Python without its site-packages (-S) has no NumPy: the analysis says to install
    it, in one line, instead of a traceback."""
    _csv(tmp_path / "run.csv", "time,cpu", _series("cpu"))
    done = _reveal("analyze", str(tmp_path / "run.csv"), "--quiet", cwd=tmp_path,
                   env={"PYTHONPATH": str(SRC)}, python=(sys.executable, "-S"))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "needs the Python package" in done.stderr and "pip install" in done.stderr


def test_failed_collector_child_gives_its_reason(tmp_path: Path) -> None:
    """The collector the demo and validate start as a child: when it fails, the error
    carries the last error line of its log, not only the log's path."""
    from reveal.errors import RevealError, with_log_reason
    from reveal.inject.faults import FaultContext
    from reveal.inject.scenario import record

    run = tmp_path / "runs" / "baseline1"
    done = _reveal("collect", "--duration", "1", "--interval", "0.25", "--quiet",
                   "--out", str(run), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with pytest.raises(RevealError) as failed:  # a second recording into the same place
        record(run, 2.0, 0.25, [], FaultContext(tmp_path, None), lambda _: None)
    message = with_log_reason(str(failed.value))
    assert "exited with code 2" in message
    assert "already holds a run" in message and "baseline1.collect.log" in message


def test_demo_run_again_keeps_the_earlier_report(tmp_path: Path) -> None:
    """What used to fail 15 s in ("the collector exited with code 2"): a second demo into
    the same directory. The new report goes to DIR-2, then DIR-3; --force empties DIR of
    what an earlier demo wrote (and only that)."""
    from reveal.commands.demo import choose_out

    notices: list[str] = []
    out = tmp_path / "demo-report"
    assert choose_out(out, False, notices.append) == out and not notices
    (out / "runs" / "demo" / "baseline1").mkdir(parents=True)
    (out / "report.md").write_text("# first\n")
    assert choose_out(out, False, notices.append) == tmp_path / "demo-report-2"
    assert "demo-report-2" in notices[-1] and "--force" in notices[-1]
    (tmp_path / "demo-report-2").mkdir()
    (tmp_path / "demo-report-2" / "report.md").write_text("# second\n")
    assert choose_out(out, False, notices.append) == tmp_path / "demo-report-3"
    assert (out / "report.md").read_text() == "# first\n"  # nothing was touched

    assert choose_out(out, True, notices.append) == out
    assert list(out.iterdir()) == [] and "replacing" in notices[-1]
