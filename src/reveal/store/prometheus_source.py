"""Read a fleet from a Prometheus server: one :class:`~reveal.frame.Telemetry` per host.

Every selector in ``match`` is evaluated with ``/api/v1/query_range`` on a step grid
``start, start + step, …, ≤ end`` (Unix seconds), in time chunks of at most
:data:`MAX_POINTS` points (Prometheus refuses more than 11,000 points per series). Series
are grouped by the value of ``host_label`` (default ``instance``); names are mapped to
catalog channels by :mod:`reveal.store.node_exporter_map` (node_exporter, ``reveal watch``'s
exporter); other gauges keep their Prometheus name, and other counters (``*_total``) and
histogram parts are left out, since the catalog does not know to rate them. Values are
as Prometheus returns them, scaled into the catalog's units; a step with no sample is NaN.
Timestamps are the grid in Unix nanoseconds, so ``wall_offset_ns`` is 0.

Label values come from the monitored hosts and are untrusted: they only ever become label
values of channel names (cleaned by :func:`reveal.frame.format_channel`) or host names
(control characters replaced).
"""

from __future__ import annotations

import json
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import datetime
from typing import Any

import numpy as np

from reveal.errors import RevealError
from reveal.frame import Telemetry, format_channel
from reveal.store.node_exporter_map import map_series

#: Most points per series in one query_range request (Prometheus refuses more than 11,000).
MAX_POINTS = 11_000
TIMEOUT_S = 60.0
_UNRATED = re.compile(r".*(_total|_count|_sum|_bucket|_created)$")
_RELATIVE = re.compile(r"^(?:now)?\s*-\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)$")
_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
Say = Callable[[str], None]


def parse_time(text: str | float, now: float | None = None) -> float:
    """Unix seconds from RFC 3339 (``2026-11-25T09:00:00Z``), Unix seconds (``1795600000``),
    ``now`` or a time before now (``-1h``, ``now-30m``; units ms, s, m, h, d, w)."""
    if isinstance(text, (int, float)):
        return float(text)
    raw = text.strip()
    now = time.time() if now is None else now
    if raw == "now":
        return now
    relative = _RELATIVE.match(raw)
    if relative:
        return now - float(relative.group(1)) * _UNITS[relative.group(2)]
    try:
        value = float(raw)
    except ValueError:
        pass
    else:
        if math.isfinite(value):
            return value
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise RevealError(f"cannot read time {text!r}: give RFC 3339 with a zone "
                          "(2026-11-25T09:00:00Z), Unix seconds, or a time before now "
                          "(-1h, -30m)")
    return parsed.timestamp()


class PrometheusClient:
    """The three read endpoints of the Prometheus HTTP API, over urllib (form POSTs)."""

    def __init__(self, url: str, timeout_s: float = TIMEOUT_S) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise RevealError(f"not a Prometheus URL: {url!r} (give http://HOST:PORT)")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _post(self, path: str, params: list[tuple[str, str]], what: str) -> Any:
        body = urllib.parse.urlencode(params).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=body, method="POST",
                                         headers={"Content-Type":
                                                  "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                payload = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise RevealError(f"Prometheus at {self.url} refused {what}: "
                              f"{_error_text(exc)} (HTTP {exc.code})") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RevealError(f"Prometheus at {self.url} is unreachable ({reason}); check "
                              "the URL and that the server is running") from None
        except json.JSONDecodeError:
            raise RevealError(f"{self.url}{path} did not answer JSON: is this a Prometheus "
                              "server?") from None
        if not isinstance(payload, dict) or payload.get("status") != "success":
            error = payload.get("error", "no reason given") if isinstance(payload, dict) \
                else "no reason given"
            raise RevealError(f"Prometheus at {self.url} refused {what}: {error}")
        return payload.get("data")

    def query_range(self, query: str, start: float, end: float, step_s: float
                    ) -> list[dict[str, Any]]:
        """The matrix of ``query`` over ``[start, end]`` every ``step_s`` seconds."""
        data = self._post("/api/v1/query_range",
                          [("query", query), ("start", _num(start)), ("end", _num(end)),
                           ("step", _num(step_s))], f"the query {query!r}")
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise RevealError(f"Prometheus at {self.url} answered {query!r} with no matrix")
        return list(data.get("result") or [])

    def series(self, match: list[str], start: float, end: float) -> list[dict[str, str]]:
        """Label sets of the series ``match`` selects between ``start`` and ``end``."""
        params = [("match[]", m) for m in match] + [("start", _num(start)),
                                                    ("end", _num(end))]
        return list(self._post("/api/v1/series", params, f"the selectors {match!r}") or [])

    def labels(self) -> list[str]:
        return list(self._post("/api/v1/labels", [], "the label list") or [])


def _num(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        payload = json.loads(exc.read())
        return str(payload.get("error") or payload)
    except (json.JSONDecodeError, OSError, AttributeError):
        return str(exc.reason)


def step_grid(start: float, end: float, step_s: float) -> np.ndarray:
    """The query grid ``start + k·step ≤ end`` as int64 Unix nanoseconds (on whole
    milliseconds, Prometheus's resolution)."""
    if not (math.isfinite(start) and math.isfinite(end)) or end < start:
        raise RevealError(f"the time range ends before it starts ({start:g} > {end:g} s)")
    if not step_s > 0:
        raise RevealError(f"the step must be positive seconds, got {step_s!r}")
    start_ms, step_ms = round(start * 1000), max(1, round(step_s * 1000))
    count = (round(end * 1000) - start_ms) // step_ms + 1
    return (start_ms + np.arange(count, dtype=np.int64) * step_ms) * 1_000_000


def chunks(start: float, end: float, step_s: float, max_points: int = MAX_POINTS
           ) -> list[tuple[float, float]]:
    """``[start, end]`` cut into ranges of at most ``max_points`` grid points each, every
    range starting on the grid, none overlapping."""
    grid_len = len(step_grid(start, end, step_s))
    per = max(1, int(max_points))
    out = []
    for first in range(0, grid_len, per):
        last = min(first + per, grid_len) - 1
        out.append((start + first * step_s, start + last * step_s))
    return out


def _host_name(value: str) -> str:
    return _CONTROL.sub("_", value)[:200]


def read_fleet(url: str, match: list[str], start: str | float, end: str | float,
               step_s: float, host_label: str = "instance", max_points: int = MAX_POINTS,
               say: Say | None = None) -> list[Telemetry]:
    """One Telemetry per value of ``host_label`` among the series the selectors ``match``
    select between ``start`` and ``end`` (see :func:`parse_time`), sampled every ``step_s``
    seconds; hosts sorted by name."""
    if not match:
        raise RevealError("give at least one series selector (--match '{job=\"node\"}')")
    t0, t1 = round(parse_time(start), 3), round(parse_time(end), 3)
    step_s = round(float(step_s), 3)
    grid = step_grid(t0, t1, step_s)
    client = PrometheusClient(url)
    pieces = chunks(t0, t1, step_s, max_points)
    columns: dict[str, dict[str, np.ndarray]] = {}  # host -> channel -> values
    totals: dict[str, dict[str, np.ndarray]] = {}
    dropped: dict[str, int] = {"unlabelled": 0, "unrated_counters": 0, "duplicates": 0}
    seen = 0
    for selector in match:
        for i, (lo, hi) in enumerate(pieces):
            if say is not None and len(pieces) > 1:
                say(f"prometheus: {selector} chunk {i + 1}/{len(pieces)}")
            for series in client.query_range(selector, lo, hi, step_s):
                seen += 1
                _add_series(series, grid, host_label, columns, totals, dropped,
                            f"query{match.index(selector)}")
    if not columns:
        what = "no series" if not seen else f"no series with the label {host_label!r}"
        raise RevealError(f"{what} at {url} matched {', '.join(match)} between "
                          f"{_iso(t0)} and {_iso(t1)}; check the selector and the time "
                          f"range (and --host-label), e.g. with {url}/api/v1/series")
    hosts = []
    for host in sorted(columns):
        merged = {**columns[host], **{k: v for k, v in totals.get(host, {}).items()
                                      if k not in columns[host]}}
        names = sorted(merged)
        values = np.column_stack([merged[n] for n in names]) if names else \
            np.empty((len(grid), 0))
        meta = {"host": host, "interval_s": float(step_s), "wall_offset_ns": 0,
                "source": "prometheus", "path": url,
                "prometheus": {"url": url, "match": list(match), "start": t0, "end": t1,
                               "step_s": float(step_s), "host_label": host_label,
                               "queries": len(pieces) * len(match), "dropped": dropped}}
        hosts.append(Telemetry(host, grid.copy(), values, names, meta))
    return hosts


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds).astimezone().isoformat(timespec="seconds")


def _add_series(series: dict[str, Any], grid: np.ndarray, host_label: str,
                columns: dict[str, dict[str, np.ndarray]],
                totals: dict[str, dict[str, np.ndarray]], dropped: dict[str, int],
                unnamed: str) -> None:
    """Put one query_range series into its host's columns (and the host's totals)."""
    labels = {str(k): str(v) for k, v in (series.get("metric") or {}).items()}
    host = labels.pop(host_label, None)
    if not host:
        dropped["unlabelled"] += 1
        return
    host = _host_name(host)
    name = labels.pop("__name__", "") or unnamed
    labels.pop("job", None)
    labels.pop("instance", None)
    mapped = map_series(name, labels)
    if mapped is None:
        if _UNRATED.match(name):
            dropped["unrated_counters"] += 1
            return
        metric, out_labels, scale, total = name, labels, 1.0, None
    else:
        metric, out_labels, scale, total = mapped.metric, mapped.labels, mapped.scale, \
            mapped.total
    raw = series.get("values") or []
    if not raw:
        return
    points = np.array(raw, dtype=str).astype(np.float64)  # (n, 2): seconds, value
    ts = np.round(points[:, 0] * 1000).astype(np.int64) * 1_000_000
    vals = points[:, 1] * scale
    pos = np.searchsorted(grid, ts)
    ok = (pos < len(grid)) & (grid[np.minimum(pos, len(grid) - 1)] == ts)
    pos, vals = pos[ok], vals[ok]
    channel = format_channel(metric, out_labels)
    host_cols = columns.setdefault(host, {})
    column = host_cols.get(channel)
    if column is None:
        column = host_cols[channel] = np.full(len(grid), np.nan)
    elif np.isfinite(column[pos]).any():
        dropped["duplicates"] += 1
        return
    column[pos] = vals
    if total is not None:
        rest = {k: v for k, v in out_labels.items() if k != total}
        summed = totals.setdefault(host, {}).setdefault(format_channel(metric, rest),
                                                        np.full(len(grid), np.nan))
        summed[pos] = np.nan_to_num(summed[pos]) + vals
