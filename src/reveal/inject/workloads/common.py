"""Shared parts of the reference workloads: synthetic sample files, stop flag, progress log.

The workloads run as their own processes (``python -m reveal.inject.workloads.NAME``) so the
collector sees them as a tenant job would look. They download nothing: their data are
synthetic images written to a directory first, then read back file by file every epoch.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

import numpy as np

IMAGE_SHAPE = (3, 32, 32)
N_CLASSES = 10


class StopFlag:
    """Set by SIGTERM/SIGINT or when ``duration_s`` seconds of training have passed
    (counted from :meth:`arm`, so slow imports and setup do not eat the training time)."""

    def __init__(self, duration_s: float) -> None:
        self.duration_s = duration_s
        self.deadline = time.monotonic() + duration_s
        self.stopped = False
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)

    def arm(self) -> None:
        """Start the training clock now."""
        self.deadline = time.monotonic() + self.duration_s

    def _stop(self, _signum: int, _frame: object) -> None:
        self.stopped = True

    def __bool__(self) -> bool:
        return self.stopped or time.monotonic() >= self.deadline


def write_samples(data_dir: Path, n_samples: int, seed: int = 0) -> list[Path]:
    """Write ``n_samples`` class-dependent synthetic images as ``.npy`` files (float32)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 1.0, size=(N_CLASSES, *IMAGE_SHAPE)).astype(np.float32)
    paths = []
    for i in range(n_samples):
        label = i % N_CLASSES
        image = centres[label] + rng.normal(0.0, 1.0, size=IMAGE_SHAPE).astype(np.float32)
        path = data_dir / f"sample_{i:05d}_{label}.npy"
        np.save(path, image)
        paths.append(path)
    return paths


def label_of(path: Path) -> int:
    return int(path.stem.rsplit("_", 1)[1])


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds to train")
    parser.add_argument("--data-dir", type=Path, required=True, help="sample files go here")
    parser.add_argument("--samples", type=int, default=1024, help="number of sample files")
    parser.add_argument("--batch", type=int, default=32, help="batch size")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads the model computes with (default 1)")
    parser.add_argument("--progress-every", type=float, default=2.0, metavar="S",
                        help="seconds between JSON progress lines (default 2)")
    return parser


class Progress:
    """Prints one JSON line per ``every_s`` seconds: steps, steps/s, last loss."""

    def __init__(self, every_s: float = 2.0, **fields: object) -> None:
        self.every_s = every_s
        self.fields = fields
        self.steps = 0
        self.start = self.last = time.monotonic()

    def step(self, loss: float) -> None:
        self.steps += 1
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            self.emit(loss)

    def emit(self, loss: float, final: bool = False) -> None:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        print(json.dumps({**self.fields, "steps": self.steps, "elapsed_s": round(elapsed, 2),
                          "steps_per_s": round(self.steps / elapsed, 2),
                          "loss": round(float(loss), 4), "final": final}), flush=True)
        sys.stdout.flush()
