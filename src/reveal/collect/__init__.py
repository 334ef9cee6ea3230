"""Telemetry probes (one module per source) and the sampler that drives them.

Importing this package registers every probe in :data:`reveal.collect.probe.REGISTRY`.
"""

from importlib.util import find_spec

from reveal.collect import (  # noqa: F401  (imported to register their probes)
    cgroup,
    cpu,
    gpu,
    interrupts,
    memory,
    netns,
    network,
    power,
    pressure,
    qdisc,
    storage,
)

# perf_event_open probe: registered when its module is present in this tree.
if find_spec("reveal.collect.perf") is not None:
    from reveal.collect import perf  # noqa: F401
