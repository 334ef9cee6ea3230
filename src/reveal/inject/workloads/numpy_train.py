"""Reference workload without PyTorch: a two-layer MLP trained with NumPy (one thread).

Reads its synthetic sample files back from disk every epoch, like :mod:`torch_train`.
Set ``OMP_NUM_THREADS=1`` (the launcher does) to keep BLAS on one core.
"""

from __future__ import annotations

import sys

import numpy as np

from reveal.inject.workloads.common import (
    N_CLASSES,
    Progress,
    StopFlag,
    base_parser,
    label_of,
    write_samples,
)


def main(argv: list[str] | None = None) -> int:
    args = base_parser(__doc__ or "").parse_args(argv)
    stop = StopFlag(args.duration)
    paths = write_samples(args.data_dir, args.samples)
    rng = np.random.default_rng(0)
    n_in, n_hidden = 3 * 32 * 32, 256
    w1 = rng.normal(0, np.sqrt(2 / n_in), (n_in, n_hidden)).astype(np.float32)
    w2 = rng.normal(0, np.sqrt(2 / n_hidden), (n_hidden, N_CLASSES)).astype(np.float32)
    lr = 0.01
    progress = Progress(args.progress_every, workload="numpy_train")
    stop.arm()
    loss = 0.0
    while not stop:
        order = rng.permutation(len(paths))
        for start in range(0, len(order) - args.batch + 1, args.batch):
            batch = [paths[i] for i in order[start:start + args.batch]]
            x = np.stack([np.load(p).ravel() for p in batch])
            y = np.array([label_of(p) for p in batch])
            hidden = np.maximum(x @ w1, 0.0)
            logits = hidden @ w2
            logits -= logits.max(axis=1, keepdims=True)
            prob = np.exp(logits)
            prob /= prob.sum(axis=1, keepdims=True)
            loss = float(-np.log(prob[np.arange(len(y)), y] + 1e-12).mean())
            grad = prob
            grad[np.arange(len(y)), y] -= 1.0
            grad /= len(y)
            grad_w2 = hidden.T @ grad
            grad_hidden = (grad @ w2.T) * (hidden > 0)
            w1 -= lr * (x.T @ grad_hidden)
            w2 -= lr * grad_w2
            progress.step(loss)
            if stop:
                break
    progress.emit(loss, final=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
