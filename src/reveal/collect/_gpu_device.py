"""One GPU as NVML shows it: discovery (which calls answer, which channels) and one poll.

Both run on the GPU's own poller thread, never on the sampler's tick path. Discovery tries
every call once: an answer ``NOT_SUPPORTED`` (or ``NO_PERMISSION``, ``FUNCTION_NOT_FOUND``,
``INVALID_ARGUMENT``) drops its channels and lists them in ``unsupported``; any other
failure keeps them (NaN until the call answers). A poll of a group returns one float64
array, NaN where a call failed this time.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reveal.collect._gpu_readings import (
    FIELDS,
    GPM_METRICS,
    MIG_READINGS,
    READINGS,
    VALUE_MEMBER,
    XID_METRICS,
    Extract,
    Reading,
)
from reveal.collect._nvml import DROP_ERRORS, error_is, option_bool, text
from reveal.frame import format_channel

GROUPS = ("fast", "slow", "xid")


@dataclass
class Bound:
    """A reading resolved for one device: the callable, its arguments (handle first), and
    ``(extractor, slot)`` pairs into its group's values."""

    func: Callable[..., Any]
    args: tuple[Any, ...]
    slots: list[tuple[Extract, int]]


@dataclass
class FieldBatch:
    """One ``nvmlDeviceGetFieldValues`` call: ``(field id, scope)`` pairs and their slots."""

    handle: Any
    ids: list[tuple[int, int]]
    slots: list[int]


@dataclass
class Gpm:
    """GPU Performance Monitoring: two samples taken in turn, metrics between the last two."""

    handle: Any
    samples: list[Any]
    ids: list[int]
    slots: list[int]
    current: int = 0
    primed: bool = False


@dataclass
class MigDevice:
    """A MIG device: GPU instance ``gi``, compute instance ``ci``, its handle and UUID."""

    gi: int
    ci: int
    handle: Any
    uuid: str = ""

    @property
    def label(self) -> str:
        return f"{self.gi}/{self.ci}"


@dataclass
class GpuLayout:
    """What one GPU gives: channel names per group (``fast``, ``slow``, ``xid``) and how to
    read the fast and slow groups."""

    index: int
    handle: Any
    identity: dict[str, Any]
    names: dict[str, list[str]] = field(default_factory=lambda: {g: [] for g in GROUPS})
    calls: dict[str, list[Bound]] = field(default_factory=lambda: {"fast": [], "slow": []})
    fields: FieldBatch | None = None
    gpm: Gpm | None = None
    mig: list[MigDevice] | None = None  # None: MIG off or not supported
    xid: bool = False
    unsupported: list[str] = field(default_factory=list)

    @property
    def channels(self) -> list[str]:
        return [name for group in GROUPS for name in self.names[group]]


class Device:
    """Discovers and polls one GPU through a pynvml-shaped module."""

    def __init__(self, nvml: Any, index: int, options: dict[str, Any]) -> None:
        self.nvml = nvml
        self.index = index
        self.options = options
        self.labels = {"gpu": str(index)}

    # -- discovery ---------------------------------------------------------------------------
    def discover(self, event_set: Any = None, xid_types: int = 0) -> GpuLayout:
        """Try every call once and lay out the channels; register XID events on
        ``event_set`` when given."""
        nvml = self.nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(self.index)
        layout = GpuLayout(self.index, handle, self.identity(handle))
        for reading in READINGS:
            if reading.option and not option_bool(self.options, reading.option, True):
                continue
            self._bind(layout, reading, handle, self.labels)
        self._bind_fields(layout, handle)
        if option_bool(self.options, "gpm", True):
            self._bind_gpm(layout, handle)
        layout.mig = self.mig_devices(handle)
        if layout.mig is not None and option_bool(self.options, "mig", True):
            layout.identity["mig"] = [{"gi": m.gi, "ci": m.ci, "uuid": m.uuid}
                                      for m in layout.mig]
            for mig in layout.mig:
                for reading in MIG_READINGS:
                    self._bind(layout, reading, mig.handle, {**self.labels, "mig": mig.label})
        if event_set is not None:
            self._register_xid(layout, handle, event_set, xid_types)
        return layout

    def identity(self, handle: Any) -> dict[str, Any]:
        """Index, name, UUID and PCI bus id ("" where NVML does not answer)."""
        nvml = self.nvml
        ident: dict[str, Any] = {"index": self.index}
        for key, func in (("name", "nvmlDeviceGetName"), ("uuid", "nvmlDeviceGetUUID")):
            try:
                ident[key] = text(getattr(nvml, func)(handle))
            except nvml.NVMLError:
                ident[key] = ""
        try:
            ident["pci_bus_id"] = text(nvml.nvmlDeviceGetPciInfo(handle).busId)
        except nvml.NVMLError:
            ident["pci_bus_id"] = ""
        return ident

    def _dropped(self, exc: Exception) -> bool:
        return error_is(self.nvml, exc, *DROP_ERRORS)

    def _bind(self, layout: GpuLayout, reading: Reading, handle: Any,
              labels: dict[str, str]) -> None:
        nvml = self.nvml
        names = [format_channel(metric, labels) for metric, _ in reading.outputs]
        func = next((getattr(nvml, f) for f in reading.funcs if hasattr(nvml, f)), None)
        if func is None:
            layout.unsupported += [f"{n}: {reading.funcs[0]} missing from the NVML bindings"
                                   for n in names]
            return
        args = tuple(getattr(nvml, a) if isinstance(a, str) else a for a in reading.args)
        try:
            answer = func(handle, *args)
        except nvml.NVMLError as exc:
            if self._dropped(exc):
                layout.unsupported += [f"{n}: {exc}" for n in names]
                return
            answer = None  # transient failure: keep the channels, NaN until it answers
        group = layout.names[reading.rate]
        slots: list[tuple[Extract, int]] = []
        for (_, extract), name in zip(reading.outputs, names, strict=True):
            if answer is not None:
                try:
                    extract(answer)
                except (TypeError, ValueError, AttributeError, IndexError):
                    layout.unsupported.append(
                        f"{name}: unexpected answer {type(answer).__name__}")
                    continue
            slots.append((extract, len(group)))
            group.append(name)
        if slots:
            layout.calls[reading.rate].append(Bound(func, (handle, *args), slots))

    def _links(self, handle: Any) -> list[int]:
        nvml = self.nvml
        links: list[int] = []
        if not hasattr(nvml, "nvmlDeviceGetNvLinkState"):
            return links
        for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                state = nvml.nvmlDeviceGetNvLinkState(handle, link)
            except nvml.NVMLError:
                break  # no NVLink, or past the last link
            if state == getattr(nvml, "NVML_FEATURE_ENABLED", 1):
                links.append(link)
        return links

    def _bind_fields(self, layout: GpuLayout, handle: Any) -> None:
        nvml = self.nvml
        if not hasattr(nvml, "nvmlDeviceGetFieldValues"):
            return
        links = self._links(handle)
        wanted: list[tuple[str, tuple[int, int]]] = []
        for metric, constant, per_link in FIELDS:
            field_id = getattr(nvml, constant, None)
            if field_id is None:
                continue
            if per_link:
                wanted += [(format_channel(metric, {**self.labels, "link": str(link)}),
                            (field_id, link)) for link in links]
            else:
                wanted.append((format_channel(metric, self.labels), (field_id, 0)))
        if not wanted:
            return
        try:
            answers = nvml.nvmlDeviceGetFieldValues(handle, [ids for _, ids in wanted])
        except nvml.NVMLError as exc:
            layout.unsupported += [f"{name}: {exc}" for name, _ in wanted]
            return
        success = getattr(nvml, "NVML_SUCCESS", 0)
        group = layout.names["fast"]
        batch = FieldBatch(handle, [], [])
        for (name, ids), answer in zip(wanted, answers, strict=False):
            if answer.nvmlReturn != success:
                layout.unsupported.append(f"{name}: {nvml.NVMLError(answer.nvmlReturn)}")
                continue
            batch.ids.append(ids)
            batch.slots.append(len(group))
            group.append(name)
        if batch.ids:
            layout.fields = batch

    def _bind_gpm(self, layout: GpuLayout, handle: Any) -> None:
        nvml = self.nvml
        names = [format_channel(metric, self.labels) for metric, _ in GPM_METRICS]
        if not hasattr(nvml, "nvmlGpmQueryDeviceSupport"):
            layout.unsupported += [f"{n}: GPM missing from the NVML bindings" for n in names]
            return
        try:
            if not nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
                layout.unsupported += [f"{n}: GPM not supported on this GPU" for n in names]
                return
            gpm = Gpm(handle, [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()],
                      [getattr(nvml, constant) for _, constant in GPM_METRICS], [])
            nvml.nvmlGpmSampleGet(handle, gpm.samples[0])
            nvml.nvmlGpmSampleGet(handle, gpm.samples[1])
            answer = nvml.nvmlGpmMetricsGet(self._metrics_request(gpm, 0, 1))
        except nvml.NVMLError as exc:
            layout.unsupported += [f"{n}: GPM: {exc}" for n in names]
            return
        success = getattr(nvml, "NVML_SUCCESS", 0)
        group = layout.names["fast"]
        kept: list[int] = []
        for i, name in enumerate(names):
            metric = answer.metrics[i]
            if metric.nvmlReturn != success:
                layout.unsupported.append(f"{name}: GPM: {nvml.NVMLError(metric.nvmlReturn)}")
                continue
            kept.append(gpm.ids[i])
            gpm.slots.append(len(group))
            group.append(name)
        gpm.ids = kept
        if kept:
            layout.gpm = gpm
        else:
            free_gpm(nvml, gpm)

    def _metrics_request(self, gpm: Gpm, first: int, second: int) -> Any:
        request = self.nvml.c_nvmlGpmMetricsGet_t()
        request.version = self.nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(gpm.ids)
        request.sample1, request.sample2 = gpm.samples[first], gpm.samples[second]
        for i, metric_id in enumerate(gpm.ids):
            request.metrics[i].metricId = metric_id
        return request

    def mig_devices(self, handle: Any) -> list[MigDevice] | None:
        """The MIG devices of a GPU in MIG mode; None when MIG is off or not supported."""
        nvml = self.nvml
        if not hasattr(nvml, "nvmlDeviceGetMigMode"):
            return None
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except nvml.NVMLError:
            return None  # NOT_SUPPORTED: a GPU without MIG
        if current != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
            return None
        devices: list[MigDevice] = []
        try:
            count = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
        except nvml.NVMLError:
            return devices
        for slot in range(count):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nvml.NVMLError:
                continue  # NOT_FOUND: no MIG device in this slot
            try:
                gi = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
                ci = int(nvml.nvmlDeviceGetComputeInstanceId(mig))
            except nvml.NVMLError:
                continue
            try:
                uuid = text(nvml.nvmlDeviceGetUUID(mig))
            except nvml.NVMLError:
                uuid = ""
            devices.append(MigDevice(gi, ci, mig, uuid))
        return devices

    def xid_channels(self) -> list[str]:
        """This GPU's XID channels: error count, last code."""
        return [format_channel(metric, self.labels) for metric in XID_METRICS]

    def _register_xid(self, layout: GpuLayout, handle: Any, event_set: Any,
                      xid_types: int) -> None:
        nvml = self.nvml
        names = self.xid_channels()
        try:
            if hasattr(nvml, "nvmlDeviceGetSupportedEventTypes"):
                supported = int(nvml.nvmlDeviceGetSupportedEventTypes(handle))
                if not supported & xid_types:
                    layout.unsupported += [f"{n}: XID events not supported on this GPU"
                                           for n in names]
                    return
            nvml.nvmlDeviceRegisterEvents(handle, xid_types, event_set)
        except nvml.NVMLError as exc:
            layout.unsupported += [f"{n}: XID event registration: {exc}" for n in names]
            return
        layout.xid = True
        layout.names["xid"] = names

    # -- polling -----------------------------------------------------------------------------
    def poll(self, layout: GpuLayout, group: str) -> np.ndarray:
        """The current values of the ``fast`` or ``slow`` group (NaN where a call failed)."""
        nvml = self.nvml
        error = nvml.NVMLError
        out = np.full(len(layout.names[group]), math.nan)
        for bound in layout.calls[group]:
            try:
                answer = bound.func(*bound.args)
            except error:
                continue
            for extract, slot in bound.slots:
                with contextlib.suppress(TypeError, ValueError, AttributeError, IndexError):
                    out[slot] = extract(answer)  # an answer of another shape stays NaN
        if group == "fast":
            if layout.fields is not None:
                self._poll_fields(layout.fields, out)
            if layout.gpm is not None:
                self._poll_gpm(layout.gpm, out)
        return out

    def _poll_fields(self, batch: FieldBatch, out: np.ndarray) -> None:
        nvml = self.nvml
        try:
            answers = nvml.nvmlDeviceGetFieldValues(batch.handle, batch.ids)
        except nvml.NVMLError:
            return
        success = getattr(nvml, "NVML_SUCCESS", 0)
        for slot, answer in zip(batch.slots, answers, strict=False):
            if answer.nvmlReturn == success:
                out[slot] = getattr(answer.value, VALUE_MEMBER.get(answer.valueType, "ullVal"))

    def _poll_gpm(self, gpm: Gpm, out: np.ndarray) -> None:
        nvml = self.nvml
        newest, previous = gpm.current, 1 - gpm.current
        try:
            nvml.nvmlGpmSampleGet(gpm.handle, gpm.samples[newest])
        except nvml.NVMLError:
            gpm.primed = False
            return
        gpm.current = previous  # the next sample overwrites the older one
        if not gpm.primed:
            gpm.primed = True
            return
        try:
            answer = nvml.nvmlGpmMetricsGet(self._metrics_request(gpm, previous, newest))
        except nvml.NVMLError:
            return
        success = getattr(nvml, "NVML_SUCCESS", 0)
        for i, slot in enumerate(gpm.slots):
            metric = answer.metrics[i]
            if metric.nvmlReturn == success:
                out[slot] = float(metric.value)


def free_gpm(nvml: Any, gpm: Gpm) -> None:
    """Release a GPM state's samples."""
    for sample in gpm.samples:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlGpmSampleFree(sample)

