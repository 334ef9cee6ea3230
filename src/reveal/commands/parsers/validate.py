"""The arguments of ``reveal validate``: its name, its help and its options."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from reveal.commands._shared_options import comma_separated
from reveal.settings import add_set_argument
from reveal.workload_names import SINGLE_WORKLOADS

if TYPE_CHECKING:
    pass


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
                 "clean time between two episodes (default 20; 15 with --quick; with --live "
                 "30, 20 with --quick, at least 20); the windows of the last 10 s settle "
                 "after each episode are not counted as clean")
    parser.add_argument("--workload", choices=SINGLE_WORKLOADS, default=None,
                        help="single-process workload: torch_train (one compute thread), "
                             "torch_busy (one per CPU: a host the job already keeps busy), "
                             "numpy_train (default: torch_train when PyTorch is installed)")
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
    parser.add_argument("--via-alertmanager", action="store_true",
                        help="with --live (the fault suite): the watch's alerts go through "
                             "a real Alertmanager started for the suite (its route waits "
                             "1 s before a group's first notification) and are scored as "
                             "its webhook receives them, as an operator is paged")
    parser.add_argument("--through-learn", default=None, metavar="KIND[:INTENSITY]",
                        help="with --live: begin this fault (intensity high unless given) "
                             "before the watch learns and undo it 10 s after the learn "
                             "ends; scored on whether the watch warned of an unhealthy "
                             "baseline naming a channel of the fault's subsystem (a fault "
                             "present through the learn must not be learned silently); "
                             "its alerts are reported on their own")
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
        "30; 20 with --quick), scored on its alert episodes (target ≤ 1; "
        "OUT/benign_live.json and .md)")
    benign.add_argument("--benign", action="store_true",
                        help="run the benign-change suite instead of the fault suite "
                             "(results: OUT/benign.json and OUT/benign.md)")
    _add_seconds(benign, "--run-seconds",
                 "with --benign: length of each run with an activity (default 90)")
    _add_seconds(benign, "--activity-at",
                 "with --benign: seconds into the run the activity starts (default 35)")
    add_set_argument(parser, "for the analysis of every run and for the watch with --live")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
