"""NVIDIA GPUs through NVML (the ``pynvml`` module of nvidia-ml-py), polled off the tick path.

NVML calls can block: ``nvmlDeviceGetPcieThroughput`` measures for 20 ms before it
answers, and a GPU in trouble may not answer at all. So no NVML call runs on the sampler's
tick: each GPU has its own poller thread (``reveal-gpuN``) that discovers the GPU and then
polls it, fast queries every ``interval_s``, slow ones every ``slow_interval_s``, into one
float64 array of latest values (:class:`~reveal.collect._gpu_board.Board`). ``read(out)``
only copies that array, and ``native_parts()`` hands the array itself to the C tick thread,
which copies it every tick: a GPU present keeps the ticks in C. A group of values whose
poller has not published for ``stale_intervals`` of its periods reads NaN (a watchdog
thread, ``reveal-gpu-watch``, sets it), so a stuck GPU shows as missing, not frozen, and
delays neither the other GPUs nor the other probes.

The probe talks to a *pynvml-shaped* object: the real ``pynvml`` module by default, or any
object with the same function names, ``NVML_*`` constants and ``NVMLError`` class (option
``nvml``; the tests replay recorded NVML answers this way).

Channels, label ``{gpu=INDEX}`` (NVLink ones add ``link=N``, MIG ones ``mig=GI/CI``), units
as NVML reports them; see ``reveal/catalog_entries/gpu.toml`` for each metric, and
``docs/collector.md`` (GPU) for rates and figures:

- ``gpu.kernel_active_pct``: NVML's ``utilization.gpu``, the percent of the last sample
  period during which one or more kernels ran (not how many SMs were busy; runs recorded
  before this name have it as ``gpu.sm_util``), ``gpu.mem_util``;
- from GPM (Hopper and later; option ``gpm``): ``gpu.sm_active_pct``,
  ``gpu.sm_occupancy_pct``, ``gpu.tensor_active_pct``, ``gpu.dram_bw_util_pct``;
- memory, power, energy, temperatures, fan, P-state, clocks, PCIe link and throughput (slow
  rate; option ``pcie_throughput``), ECC, retired pages and row remapping, clock-event
  reasons, NVLink counters (one ``nvmlDeviceGetFieldValues`` batch per poll);
- MIG (option ``mig``): ``gpu.mig.mem_used_bytes``, ``gpu.mig.mem_free_bytes``,
  ``gpu.mig.mem_total_bytes`` per MIG device;
- XID (option ``xid``): ``gpu.xid_errors`` (XID critical errors since the probe opened,
  from NVML events waited for on ``reveal-gpu-xid``) and ``gpu.xid_last`` (the last code).

GPU identity (index, name, UUID, PCI bus id, MIG devices) goes to ``info["gpus"]``; calls
NVML answers NOT_SUPPORTED to, to ``info["unsupported"]``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, ClassVar

from reveal.collect._gpu_device import GROUPS, Device, GpuLayout, free_gpm
from reveal.collect._gpu_poller import (
    GpuPoller,
    NvmlPolling,
    Timing,
    Watchdog,
    XidWatcher,
    nvml_options_help,
)
from reveal.collect._gpu_readings import FIELDS, READINGS
from reveal.collect._nvml import option_bool, option_float, text
from reveal.collect.probe import ProbeUnavailable, register

__all__ = ["FIELDS", "READINGS", "GpuProbe"]

# whole-GPU activity a MIG-mode GPU may not report (named in the reason when dropped)
_WHOLE_GPU_ACTIVITY = ("gpu.kernel_active_pct", "gpu.mem_util", "gpu.sm_active_pct",
                       "gpu.sm_occupancy_pct", "gpu.tensor_active_pct", "gpu.dram_bw_util_pct")


@register
class GpuProbe(NvmlPolling):
    """Per-GPU utilisation, SM activity, memory, power, clocks, PCIe, ECC, NVLink, MIG, XID."""

    name = "gpu"
    description = ("NVIDIA GPU utilisation, SM activity, memory, power, clocks, PCIe, ECC, "
                   "NVLink, MIG, XID (NVML, polled on its own threads)")
    options_help: ClassVar[dict[str, str]] = nvml_options_help({
        "interval_s": "seconds between polls of the fast NVML queries (default 0.1)",
        "slow_interval_s": "seconds between polls of the slow queries: PCIe throughput "
                           "(20 ms per call), limits, lifetime ECC, retired pages, MIG "
                           "re-scan (default 1.0)",
        "stale_intervals": "a group of values not refreshed for this many of its poll "
                           "periods reads NaN (default 3)",
        "pcie_throughput": "read PCIe TX/RX throughput, 20 ms per direction per GPU, at the "
                           "slow rate (default true)",
        "gpm": "SM activity, occupancy, tensor and DRAM use from GPM where the GPU has it "
               "(default true)",
        "mig": "per-MIG-device memory channels on GPUs in MIG mode (default true)",
        "xid": "count XID critical errors through NVML events (default true)",
        "xid_wait_ms": "longest single wait for an NVML event, milliseconds (default 100)",
    })

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._lock = threading.Lock()
        self._posted: dict[int, tuple[GpuLayout | None, str]] = {}
        self._posted_event = threading.Condition(self._lock)
        self._layouts: dict[int, GpuLayout] = {}
        self._failures: dict[int, str] = {}
        self._pollers: list[GpuPoller] = []
        self._watchdog: Watchdog | None = None
        self._xid: XidWatcher | None = None
        self._event_set: Any = None
        self._count = 0

    # -- open --------------------------------------------------------------------------------
    def open(self) -> None:
        opts = self.options
        nvml = self._start_nvml(Timing(option_float(opts, "interval_s", 0.1),
                                       option_float(opts, "slow_interval_s", 1.0),
                                       round(option_float(opts, "xid_wait_ms", 100))))
        try:
            self._count = int(nvml.nvmlDeviceGetCount())
            if self._count == 0:
                raise ProbeUnavailable("gpu: NVML started but reports no GPU")
            self.info["driver_version"] = text(nvml.nvmlSystemGetDriverVersion())
        except ProbeUnavailable as exc:
            self.status, self.reason = "unavailable", str(exc)
            self.close()
            raise
        except nvml.NVMLError as exc:
            self.status, self.reason = "unavailable", f"gpu: NVML query failed at start: {exc}"
            self.close()
            raise ProbeUnavailable(self.reason) from exc
        self._open_events()
        self._start_pollers()
        self._wait_for_discovery(option_float(opts, "open_timeout_s", 5.0))
        self._adopt()
        answered = len(self._layouts) + len(self._failures) == self._count
        if not self.channels and answered:
            reason = "gpu: " + ("; ".join(self._failures.values()) if self._failures else
                                "every NVML query is unsupported on these GPUs")
            self.status, self.reason = "unavailable", reason
            self.close()
            raise ProbeUnavailable(reason)
        self._watchdog = Watchdog(self._board, self.timing.interval_s)
        self._watchdog.start()
        if self._xid is not None:
            self._xid.start()

    def _open_events(self) -> None:
        nvml = self._nvml
        if not option_bool(self.options, "xid", True) or not hasattr(nvml, "nvmlEventSetCreate"):
            return
        try:
            self._event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            self.info["xid"] = f"no XID counts: nvmlEventSetCreate: {exc}"
            return
        self._xid = XidWatcher(nvml, self._event_set, self._board, self.timing)

    def _start_pollers(self) -> None:
        xid_types = int(getattr(self._nvml, "nvmlEventTypeXidCriticalError", 0x8))
        for index in range(self._count):
            device = Device(self._nvml, index, self.options)
            registered = [False]

            def discover(device: Device = device, registered: list[bool] = registered
                         ) -> GpuLayout:
                # XID events are registered once per GPU, at its first discovery
                event_set = None if registered[0] else self._event_set
                layout = device.discover(event_set, xid_types)
                registered[0] = registered[0] or layout.xid
                layout.xid = registered[0]
                if layout.xid and not layout.names["xid"]:
                    layout.names["xid"] = device.xid_channels()
                return layout

            poller = GpuPoller(device, self._board, self.timing, self._post, discover)
            self._pollers.append(poller)
            poller.start()

    def _post(self, index: int, layout: GpuLayout | None, failure: str) -> None:
        with self._posted_event:
            self._posted[index] = (layout, failure)
            self._posted_event.notify_all()

    def _wait_for_discovery(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with self._posted_event:
            while len(self._posted) < self._count:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._posted_event.wait(left)

    # -- layout ------------------------------------------------------------------------------
    def _adopt(self) -> bool:
        """Take the layouts the pollers posted; True when the channels changed."""
        with self._posted_event:
            posted, self._posted = self._posted, {}
        if not posted:
            return False
        for index, (layout, failure) in posted.items():
            if layout is None:
                self._failures[index] = failure
                self._layouts.pop(index, None)
            else:
                self._failures.pop(index, None)
                self._layouts[index] = layout
                if layout.xid and self._xid is not None:
                    self._xid.watch(index)
        blocks: list[tuple[Any, int, float]] = []
        channels: list[str] = []
        for index in sorted(self._layouts):
            layout = self._layouts[index]
            for group in GROUPS:
                names = layout.names[group]
                if names:
                    blocks.append(((index, group), len(names), self._stale_s(group)))
                    channels += names
        before = self.channels
        self._board.layout(blocks)
        self.channels = channels
        self._describe()
        return channels != before

    def _stale_s(self, group: str) -> float:
        period = {"fast": self.timing.interval_s, "slow": self.timing.slow_interval_s,
                  "xid": max(self.timing.interval_s, self.timing.xid_wait_ms / 1e3)}[group]
        return self.stale_intervals * period

    def _describe(self) -> None:
        """Status, reason and info from the adopted layouts and the GPUs without one."""
        layouts = [self._layouts[i] for i in sorted(self._layouts)]
        self.info["gpus"] = [layout.identity for layout in layouts]
        self.info["unsupported"] = [u for layout in layouts for u in layout.unsupported]
        self.info["rates_s"] = {"fast": self.timing.interval_s,
                                "slow": self.timing.slow_interval_s}
        notes: list[str] = []
        for layout in layouts:
            if layout.mig is not None:
                labels = ", ".join(m.label for m in layout.mig) or "none"
                dropped = sorted({u.split("{", 1)[0] for u in layout.unsupported
                                  if u.split("{", 1)[0] in _WHOLE_GPU_ACTIVITY})
                collected = ("per-instance memory collected (gpu.mig.*)"
                             if option_bool(self.options, "mig", True)
                             else "per-instance channels off (option mig)")
                notes.append(f"GPU {layout.index} in MIG mode, instances GI/CI {labels}: "
                             f"{collected}" + (f"; NVML does not answer {', '.join(dropped)} "
                                               "for the whole GPU" if dropped else ""))
        missing = [i for i in range(self._count) if i not in self._layouts]
        for index in missing:
            notes.append(self._failures.get(index) or
                         f"GPU {index}: no answer yet; its channels join at a refresh")
        self.info["mig_gpus"] = [layout.index for layout in layouts if layout.mig is not None]
        self.status = "degraded" if notes else "ok"
        self.reason = "gpu: " + "; ".join(notes) if notes else ""

    # -- sampling ----------------------------------------------------------------------------

    def refresh(self) -> bool:
        """Adopt layouts the pollers found (a late GPU, a MIG change); no NVML call."""
        changed = self._adopt()
        stale = self._board.stale_keys()
        self.info["stale_groups"] = [f"gpu={i}:{g}" for i, g in stale]
        self.info["stale_expiries"] = self._board.expired
        self.info["poll_overruns"] = {p.device.index: p.overruns for p in self._pollers}
        if self._xid is not None:
            self.info["xid_unattributed"] = self._xid.unattributed
        if stale:
            gpus = sorted({i for i, _ in stale})
            self.status = "degraded"
            self.reason = (f"gpu: GPU {', '.join(map(str, gpus))} not answering within "
                           f"{self.stale_intervals:g} poll periods; those values read NaN")
        elif not changed:
            self._describe()
        return changed

    def close(self) -> None:
        self._stop_nvml([*self._pollers, self._watchdog, self._xid], self._release)
        self._pollers, self._watchdog, self._xid, self._event_set = [], None, None, None

    def _release(self, nvml: Any) -> None:
        """Free the GPM samples and the XID event set (NVML still up)."""
        for layout in self._layouts.values():
            if layout.gpm is not None:
                free_gpm(nvml, layout.gpm)
        if self._event_set is not None:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlEventSetFree(self._event_set)
