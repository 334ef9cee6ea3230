"""Reference workload: a small CNN trained with PyTorch (one CPU thread).

Writes synthetic sample files to ``--data-dir``, then trains with a DataLoader that reads
them back from disk every epoch, until ``--duration`` seconds pass or SIGTERM. The model
runs on the CPU, or on a GPU with ``--device cuda`` (batches are copied to it each step).
"""

from __future__ import annotations

import sys
from pathlib import Path

from reveal.inject.workloads.common import (
    N_CLASSES,
    Progress,
    StopFlag,
    base_parser,
    label_of,
    write_samples,
)


def build_model():  # type: ignore[no-untyped-def]
    """A two-convolution CNN with a small MLP head (about 0.3 M parameters)."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
        nn.Flatten(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, N_CLASSES),
    )


def make_dataset(paths: list[Path]):  # type: ignore[no-untyped-def]
    import numpy as np
    import torch
    from torch.utils.data import Dataset

    class SampleFiles(Dataset):  # type: ignore[type-arg]
        """Reads one ``.npy`` image per item from disk."""

        def __len__(self) -> int:
            return len(paths)

        def __getitem__(self, index: int):  # type: ignore[no-untyped-def]
            path = paths[index]
            return torch.from_numpy(np.load(path)), label_of(path)

    return SampleFiles()


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__ or "")
    parser.add_argument("--device", default="cpu",
                        help="where the model runs: cpu (default), cuda or cuda:N")
    args = parser.parse_args(argv)
    import torch
    from torch.utils.data import DataLoader

    torch.set_num_threads(max(1, args.threads))
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    stop = StopFlag(args.duration)
    paths = write_samples(args.data_dir, args.samples)
    loader = DataLoader(make_dataset(paths), batch_size=args.batch, shuffle=True,
                        num_workers=0)
    device = torch.device(args.device)
    model = build_model().to(device)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    progress = Progress(args.progress_every, workload="torch_train",
                        threads=torch.get_num_threads())
    stop.arm()
    loss = torch.tensor(0.0, device=device)
    while not stop:
        for images, labels in loader:
            optimiser.zero_grad()
            images, labels = images.to(device), labels.to(device)
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimiser.step()
            progress.step(loss.item())
            if stop:
                break
    progress.emit(loss.item(), final=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
