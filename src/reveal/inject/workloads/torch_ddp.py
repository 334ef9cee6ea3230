"""Reference workload: the CNN of :mod:`torch_train`, data-parallel over gloo.

One process per rank; run each inside its own network namespace so the gradient
all-reduce crosses the suite's veth pair. Rank 0 hosts the rendezvous store at
``--master:--port``.
"""

from __future__ import annotations

import sys
from datetime import timedelta

from reveal.inject.workloads.common import Progress, StopFlag, base_parser, write_samples
from reveal.inject.workloads.torch_train import build_model, make_dataset


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__ or "")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--master", required=True, help="rank 0's address")
    parser.add_argument("--port", type=int, default=29513)
    args = parser.parse_args(argv)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    stop = StopFlag(args.duration)
    paths = write_samples(args.data_dir, args.samples, seed=args.rank)
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}:{args.port}",
                            rank=args.rank, world_size=args.world,
                            timeout=timedelta(seconds=60))
    dataset = make_dataset(paths)
    sampler = DistributedSampler(dataset, num_replicas=args.world, rank=args.rank)
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler, num_workers=0)
    model = DistributedDataParallel(build_model())
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    progress = Progress(args.progress_every, workload="torch_ddp", rank=args.rank)
    stop.arm()
    loss = torch.tensor(0.0)
    epoch = 0
    done = torch.zeros(1)
    while True:
        sampler.set_epoch(epoch)
        epoch += 1
        for images, labels in loader:
            # Every rank agrees on stopping, so no rank waits in an all-reduce alone.
            done.fill_(1.0 if stop else 0.0)
            dist.all_reduce(done, op=dist.ReduceOp.MAX)
            if done.item() > 0:
                break
            optimiser.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimiser.step()
            progress.step(loss.item())
        if done.item() > 0:
            break
    progress.emit(loss.item(), final=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
