"""``reveal validate``: inject real faults into a reference workload and score the verdicts."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from reveal.commands._shared_options import comma_separated
from reveal.errors import RevealError
from reveal.paths import check_writable_dir
from reveal.settings import add_set_argument, parse_sets

if TYPE_CHECKING:
    from reveal.inject.validation import SuiteOptions

NAME = "validate"
HELP = ("Record a reference ML workload with the real collector, inject faults at known "
        "times, analyse, and score detection, time to detect and attribution.")


def _names(text: str) -> tuple[str, ...]:
    return tuple(comma_separated(text))


def _add_seconds(options: argparse._ActionsContainer, flag: str, help_text: str) -> None:
    """An option giving a number of seconds (``S``); None when not given: the suite's
    own default."""
    options.add_argument(flag, type=float, default=None, metavar="S", help=help_text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="a small suite (CPU contention and a disk burst, once) in ≤ 5 min")
    parser.add_argument("--out", type=Path, default=Path("validate-out"), metavar="DIR",
                        help="where runs, reports, validate.json and validate.md go")
    parser.add_argument("--repetitions", type=int, default=None, metavar="N",
                        help="repetitions of every fault × intensity (default 3; 1 with --quick)")
    parser.add_argument("--faults", type=_names, default=None, metavar="F1,F2",
                        help="faults to inject (default: cpu_contention, memory_pressure, "
                             "writeback_storm, disk_burst, packet_loss, udp_flood)")
    parser.add_argument("--intensities", type=_names, default=None, metavar="I1,I2",
                        help="intensities (low, high; packet_loss also has trace = 0.1 %%)")
    _add_seconds(parser, "--baseline-seconds",
                 "length of each scenario's clean baseline run (default 60; with --live the "
                 "watch's own learn, 600; 45 with --quick)")
    _add_seconds(parser, "--episode-seconds", "length of each injected episode")
    _add_seconds(parser, "--gap-seconds",
                 "clean time between two episodes (default 20; 15 with --quick); the windows "
                 "of the last 10 s settle after each episode are not counted as clean")
    parser.add_argument("--workload", choices=("torch_train", "numpy_train"), default=None,
                        help="single-process workload (default: PyTorch when installed)")
    parser.add_argument("--cleanup", action="store_true",
                        help="only remove what killed runs left (namespaces, temp files, "
                             "HugePages setting, processes) and exit")
    parser.add_argument("--reanalyse", type=Path, default=None, metavar="DIR",
                        help="record nothing: analyse and score again the runs an earlier "
                             "suite recorded in DIR (e.g. after changing the detectors); "
                             "results and run reports go to --out when given (DIR is then "
                             "left untouched), else into DIR")
    parser.add_argument("--live", action="store_true",
                        help="run the faults against a running `reveal watch` (which learns "
                             "for --baseline-seconds) and score the alerts its webhook "
                             "receives: detection, fault start → alert time, subsystem, "
                             "false alerts per hour")
    parser.add_argument("--score-every", type=int, default=None, metavar="N",
                        help="with --live: the watch's --score-every (default 5)")
    _add_seconds(parser, "--clean-seconds",
                 "with --live: after the learn, run S seconds with no fault first; its alert "
                 "episodes and the watch's memory (RSS every 10 s) are reported on their own")
    benign = parser.add_argument_group(
        "benign-change suite (--benign)",
        "ordinary host activity that is not a fault (a commit, a login, the page cache "
        "dropped, a container started), each in its own run beside the workload with its "
        "own baseline; scored on the share of windows flagged (target ≤ 1 %). --faults "
        "picks kinds, --baseline-seconds the baselines (default 90), --episode-seconds how "
        "long a held activity lasts (default 20), --quick three kinds with 45 s recordings. "
        "With --live: every kind in turn beside one running `reveal watch` that learned "
        "--baseline-seconds (default 600; 60 with --quick), --gap-seconds apart (default "
        "30), scored on its alert episodes (target ≤ 1; OUT/benign_live.json and .md)")
    benign.add_argument("--benign", action="store_true",
                        help="run the benign-change suite instead of the fault suite "
                             "(results: OUT/benign.json and OUT/benign.md)")
    _add_seconds(benign, "--run-seconds",
                 "with --benign: length of each run with an activity (default 90)")
    _add_seconds(benign, "--activity-at",
                 "with --benign: seconds into the run the activity starts (default 35)")
    add_set_argument(parser, "for the analysis of every run and for the watch with --live")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args: argparse.Namespace) -> int:
    from reveal.inject.cleanup import install_signal_handlers, remove_leftovers

    if args.cleanup:
        from reveal.inject.benign.leftovers import remove_leftovers as benign_leftovers

        removed = remove_leftovers() + benign_leftovers()
        for line in removed:
            print(f"removed {line}")
        print(f"{len(removed)} leftovers removed" if removed else "nothing to clean up")
        return 0


    if args.benign:
        return _run_benign(args)
    for given, flag in ((args.run_seconds, "--run-seconds"),
                        (args.activity_at, "--activity-at")):
        if given is not None:
            raise RevealError(f"{flag} applies to --benign only")

    # results go to --out, or into the --reanalyse directory when no --out is given
    check_writable_dir(args.reanalyse if args.reanalyse is not None
                       and args.out == Path("validate-out") else args.out)
    from reveal.inject.validation import (
        load_recorded,
        run_live_suite,
        run_suite,
        score_recorded,
        write_result,
    )

    options = suite_options(args)
    install_signal_handlers()

    def say(message: str) -> None:
        if not args.quiet:
            print(f"reveal validate: {message}", file=sys.stderr, flush=True)

    for given, flag in ((args.score_every, "--score-every"),
                        (args.clean_seconds, "--clean-seconds")):
        if given is not None and not args.live:
            raise RevealError(f"{flag} applies to --live only")
    if options.clean_s < 0:
        raise RevealError("--clean-seconds cannot be negative")
    if options.score_every < 1:
        raise RevealError("--score-every must be at least 1")
    if args.live and args.reanalyse is not None:
        raise RevealError("--live scores a running watch; it cannot --reanalyse recorded runs")
    if args.live:
        result = run_live_suite(options, args.out, say)
        out = args.out
    elif args.reanalyse is not None:
        out = args.reanalyse if args.out == Path("validate-out") else args.out
        elsewhere = out.resolve() != args.reanalyse.resolve()
        # into another directory: the recorded suite is left as it was
        result = score_recorded(load_recorded(args.reanalyse), options, say,
                                reports_to=out / "reports" if elsewhere else None)
    else:
        result = run_suite(options, args.out, say)
        out = args.out
    json_path, md_path = write_result(result, out)
    print(md_path.read_text(encoding="utf-8"))
    print(f"written: {json_path}, {md_path}")
    return 0


def _settings(args: argparse.Namespace) -> dict:
    """``--set`` by dotted name, checked against the analysis settings before any run."""
    from reveal.analysis.presets import TELEMETRY, with_overrides

    settings = parse_sets(args.settings)
    with_overrides(TELEMETRY, settings)
    return settings


def _run_benign(args: argparse.Namespace) -> int:
    """``reveal validate --benign``: record (or ``--reanalyse``) the benign-change suite."""

    from reveal.inject.benign.suite import (
        BenignOptions,
        reanalyse,
        run_benign_suite,
        write_result,
    )
    from reveal.inject.cleanup import install_signal_handlers

    for given, flag in ((args.intensities, "--intensities"),
                        (args.repetitions, "--repetitions"),
                        (args.clean_seconds, "--clean-seconds")):
        if given:
            raise RevealError(f"{flag} does not apply to --benign (one run per kind, "
                              "each with its own baseline)")
    for given, flag in ((args.gap_seconds, "--gap-seconds"),
                        (args.score_every, "--score-every")):
        if given is not None and not args.live:
            raise RevealError(f"{flag} applies to --benign with --live only")
    if args.live and args.reanalyse is not None:
        raise RevealError("--live scores a running watch; it cannot --reanalyse recorded runs")
    options = BenignOptions.quick_suite() if args.quick else BenignOptions()
    changes = {"kinds": args.faults, "baseline_s": args.baseline_seconds,
               "run_s": args.run_seconds, "at_s": args.activity_at,
               "activity_s": args.episode_seconds, "workload": args.workload,
               "settings": _settings(args)}
    if args.live and args.baseline_seconds is None:  # the watch's own learn
        from reveal.inject.benign.live import LEARN_S, QUICK_LEARN_S

        changes["baseline_s"] = QUICK_LEARN_S if args.quick else LEARN_S
    from reveal.inject.benign import BENIGN, LIVE_ONLY

    if args.live and args.faults is None and not args.quick:
        changes["kinds"] = tuple(BENIGN)  # the live-only kinds too
    live_only = [k for k in (args.faults or ()) if k in LIVE_ONLY]
    if live_only and not args.live:
        raise RevealError(f"{', '.join(live_only)} runs beside a live watch only (--live)")
    options = dataclasses.replace(options, **{k: v for k, v in changes.items() if v is not None})

    def say(message: str) -> None:
        if not args.quiet:
            print(f"reveal validate: {message}", file=sys.stderr, flush=True)

    if args.live:
        from reveal.inject.benign import live
        from reveal.inject.benign.suite import build_scenario
        from reveal.inject.live_suite import MIN_GAP_S, RESOLVE_AFTER_S

        build_scenario(options)  # option errors before anything runs
        score_every = 5 if args.score_every is None else args.score_every
        if score_every < 1:
            raise RevealError("--score-every must be at least 1")
        gap = live.GAP_S if args.gap_seconds is None else args.gap_seconds
        if gap < MIN_GAP_S:
            raise RevealError(f"--gap-seconds must be at least {MIN_GAP_S:g} with --live "
                              f"(an alert resolves {RESOLVE_AFTER_S:g} s after its last "
                              f"flagged window)")
        check_writable_dir(args.out)
        install_signal_handlers()
        result = live.run_live_benign(options, args.out, say, gap_s=gap,
                                      score_every=score_every)
        json_path, md_path = live.write_result(result, args.out)
        print(md_path.read_text(encoding="utf-8"))
        print(f"written: {json_path}, {md_path}")
        return 0
    if args.reanalyse is not None:
        out = args.reanalyse if args.out == Path("validate-out") else args.out
        check_writable_dir(out)
        elsewhere = out.resolve() != args.reanalyse.resolve()
        result = reanalyse(args.reanalyse, options, say,
                           reports_to=out / "reports" if elsewhere else None)
    else:
        from reveal.inject.benign.suite import build_scenario

        build_scenario(options)  # option errors before anything is recorded
        check_writable_dir(args.out)
        install_signal_handlers()
        out = args.out
        result = run_benign_suite(options, out, say)
    json_path, md_path = write_result(result, out)
    print(md_path.read_text(encoding="utf-8"))
    print(f"written: {json_path}, {md_path}")
    return 0


def suite_options(args: argparse.Namespace) -> SuiteOptions:
    """The fault suite's options from the command line: ``--quick``'s small suite or the
    full one, with every option given; with ``--live`` the watch learns as long as it does
    by default unless ``--baseline-seconds`` says otherwise."""
    from reveal.inject.validation import SuiteOptions
    from reveal.live.service import DEFAULT_LEARN_S

    options = SuiteOptions.quick_suite() if args.quick else SuiteOptions()
    changes = {"repetitions": args.repetitions, "faults": args.faults,
               "intensities": args.intensities, "baseline_s": args.baseline_seconds,
               "episode_s": args.episode_seconds, "gap_s": args.gap_seconds,
               "workload": args.workload,
               "score_every": args.score_every, "clean_s": args.clean_seconds,
               "settings": _settings(args)}
    options = dataclasses.replace(options, **{k: v for k, v in changes.items() if v is not None})
    if args.live and args.baseline_seconds is None and not args.quick:
        options = dataclasses.replace(options, baseline_s=DEFAULT_LEARN_S)
    if options.repetitions < 1:
        raise RevealError("--repetitions must be at least 1")
    if options.gap_s < options.settle_s:
        raise RevealError(f"--gap-seconds must be at least the settle time after an episode "
                          f"({options.settle_s:g} s)")
    return options
