"""A host configured differently from the baseline's, or changed during the run, is said
in the report's warnings: detection leaves such constant channels out."""

from __future__ import annotations

import numpy as np

from reveal.analysis.hostconfig import configuration, configuration_warnings, is_configuration
from reveal.frame import Telemetry
from reveal.model import Reveal
from synthetic import ar1_host

POOL = "hugepages.nr{size=2048kB}"


def _with(tel: Telemetry, channels: dict[str, np.ndarray]) -> Telemetry:
    return Telemetry(tel.host, tel.timestamps_ns,
                     np.column_stack([tel.values, *channels.values()]),
                     list(tel.channels) + list(channels), dict(tel.meta))


def _pool(tel: Telemetry, pages: float, from_sample: int = 0) -> Telemetry:
    column = np.zeros(tel.n_samples)
    column[from_sample:] = pages
    return _with(tel, {POOL: column, "mem.MemTotal": np.full(tel.n_samples, 24.0 * 2**30),
                       "vmstat.nr_dirty_threshold": np.linspace(1e5, 2e5, tel.n_samples)})


def _warnings(base: Telemetry, run: Telemetry) -> list[str]:
    return Reveal().fit(base).report(run).warnings


def test_a_pool_reserved_during_the_run_is_named_once_with_its_values():
    base = _pool(ar1_host(120.0, seed=5), 0.0)
    run = _pool(ar1_host(60.0, seed=6, start_s=200.0), 512.0, from_sample=300)
    said = [w for w in _warnings(base, run) if "configuration" in w or "configured" in w]
    assert said == [f"the host's configuration changed during the run: {POOL} from 0 pages "
                    f"to 512 pages"]


def test_a_run_on_a_host_set_up_differently_says_so_and_the_same_host_says_nothing():
    base = _pool(ar1_host(120.0, seed=7), 0.0)
    other = _pool(ar1_host(60.0, seed=8, start_s=200.0), 512.0)
    (said,) = [w for w in _warnings(base, other) if "configured differently" in w]
    assert f"{POOL} 512 pages (baseline 0 pages)" in said
    same = _pool(ar1_host(60.0, seed=9, start_s=200.0), 0.0)
    assert not [w for w in _warnings(base, same) if "configur" in w]


def test_levels_the_kernel_recomputes_are_not_configuration():
    """The dirty thresholds move with free memory, so they are no setting of the host."""
    assert is_configuration("mem.HugePages_Total") and is_configuration(POOL)
    assert not is_configuration("vmstat.nr_dirty_threshold")
    assert not is_configuration("mem.DirectMap4k") and not is_configuration("mem.MemFree")


def test_configuration_reads_first_and_last_finite_values_and_names_at_most_four():
    tel = _with(ar1_host(5.0, seed=1), {POOL: np.r_[np.nan, np.full(49, 8.0)]})
    assert configuration(tel)[POOL] == (8.0, 8.0)
    run = {f"snmp.Tcp.RtoMin{{ns=n{i}}}": (200.0, 200.0 + i) for i in range(1, 7)}
    (said,) = configuration_warnings({}, run)
    assert said.count(" from 200 ms to ") == 4 and said.endswith("and 2 more")
