"""``reveal validate``: inject real faults into a reference workload and score the verdicts."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from reveal.analysis.presets import TELEMETRY, with_overrides
from reveal.errors import RevealError
from reveal.inject.alertmanager import MISSING, find_alertmanager
from reveal.inject.benign import BENIGN, LIVE_ONLY, live
from reveal.inject.benign.leftovers import remove_leftovers as benign_leftovers
from reveal.inject.benign.live import LEARN_S, QUICK_LEARN_S
from reveal.inject.benign.suite import (
    BenignOptions,
    build_scenario,
    reanalyse,
    run_benign_suite,
)
from reveal.inject.benign.suite import write_result as write_benign_result
from reveal.inject.cleanup import install_signal_handlers, remove_leftovers
from reveal.inject.live_suite import live_gap, through_learn_fault
from reveal.inject.validation import (
    SuiteOptions,
    load_recorded,
    run_live_suite,
    run_suite,
    score_recorded,
    write_result,
)
from reveal.live.service import DEFAULT_LEARN_S
from reveal.paths import check_writable_dir
from reveal.settings import parse_sets


def run(args: argparse.Namespace) -> int:
    if args.cleanup:
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

    options = suite_options(args)
    install_signal_handlers()

    def say(message: str) -> None:
        if not args.quiet:
            print(f"reveal validate: {message}", file=sys.stderr, flush=True)

    for given, flag in ((args.score_every, "--score-every"),
                        (args.clean_seconds, "--clean-seconds"),
                        (args.via_alertmanager or None, "--via-alertmanager"),
                        (args.through_learn, "--through-learn")):
        if given is not None and not args.live:
            raise RevealError(f"{flag} applies to --live only")
    if options.clean_s < 0:
        raise RevealError("--clean-seconds cannot be negative")
    if options.score_every < 1:
        raise RevealError("--score-every must be at least 1")
    if args.live and args.reanalyse is not None:
        raise RevealError("--live scores a running watch; it cannot --reanalyse recorded runs")
    if options.via_alertmanager and find_alertmanager() is None:
        raise RevealError(MISSING)
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
    settings = parse_sets(args.settings)
    with_overrides(TELEMETRY, settings)
    return settings


def _run_benign(args: argparse.Namespace) -> int:
    """``reveal validate --benign``: record (or ``--reanalyse``) the benign-change suite."""


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
    if args.via_alertmanager:
        raise RevealError("--via-alertmanager applies to the fault suite with --live, "
                          "not to --benign")
    if args.live and args.reanalyse is not None:
        raise RevealError("--live scores a running watch; it cannot --reanalyse recorded runs")
    options = BenignOptions.quick_suite() if args.quick else BenignOptions()
    changes = {"kinds": args.faults, "baseline_s": args.baseline_seconds,
               "run_s": args.run_seconds, "at_s": args.activity_at,
               "activity_s": args.episode_seconds, "workload": args.workload,
               "settings": _settings(args)}
    if args.live and args.baseline_seconds is None:  # the watch's own learn

        changes["baseline_s"] = QUICK_LEARN_S if args.quick else LEARN_S

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
        build_scenario(options)  # option errors before anything runs
        score_every = 5 if args.score_every is None else args.score_every
        if score_every < 1:
            raise RevealError("--score-every must be at least 1")
        gap = live_gap(args.gap_seconds, args.quick)
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
        build_scenario(options)  # option errors before anything is recorded
        check_writable_dir(args.out)
        install_signal_handlers()
        out = args.out
        result = run_benign_suite(options, out, say)
    json_path, md_path = write_benign_result(result, out)
    print(md_path.read_text(encoding="utf-8"))
    print(f"written: {json_path}, {md_path}")
    return 0


def suite_options(args: argparse.Namespace) -> SuiteOptions:
    """The fault suite's options from the command line: ``--quick``'s small suite or the
    full one, with every option given; with ``--live`` the watch learns as long as it does
    by default unless ``--baseline-seconds`` says otherwise."""
    options = SuiteOptions.quick_suite() if args.quick else SuiteOptions()
    changes = {"repetitions": args.repetitions, "faults": args.faults,
               "intensities": args.intensities, "baseline_s": args.baseline_seconds,
               "episode_s": args.episode_seconds, "gap_s": args.gap_seconds,
               "workload": args.workload,
               "score_every": args.score_every, "clean_s": args.clean_seconds,
               "via_alertmanager": args.via_alertmanager or None,
               "through_learn": args.through_learn, "settings": _settings(args)}
    options = dataclasses.replace(options, **{k: v for k, v in changes.items() if v is not None})
    if args.live and args.baseline_seconds is None and not args.quick:
        options = dataclasses.replace(options, baseline_s=DEFAULT_LEARN_S)
    if args.live:  # the live suite's gaps: room for an alert to resolve
        options = dataclasses.replace(options, gap_s=live_gap(args.gap_seconds, args.quick))
    if options.through_learn:
        through_learn_fault(options.through_learn)  # an unknown kind: refused before a run
    if options.repetitions < 1:
        raise RevealError("--repetitions must be at least 1")
    if options.gap_s < options.settle_s:
        raise RevealError(f"--gap-seconds must be at least the settle time after an episode "
                          f"({options.settle_s:g} s)")
    return options
