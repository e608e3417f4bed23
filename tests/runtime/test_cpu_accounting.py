"""Where a set of CPUs' time went: `/proc/stat` read per CPU, and the shares computed by hand."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from offpolicy.runtime import cpu_accounting
from offpolicy.runtime.cpu_accounting import CpuSample, cpu_shares, read_cpu_times, shares_between

STAT = """cpu  900 0 90 9000 9 0 9 9 0 0
cpu0 100 1 20 1000 3 4 5 6 0 0
cpu1 200 2 30 2000 7 8 9 10 0 0
cpu2 300 3
intr 1 2 3
ctxt 123
"""


def test_read_cpu_times_takes_the_asked_cpus_rows_in_order_in_seconds(tmp_path):
    path = tmp_path / "stat"
    path.write_text(STAT)
    hz = os.sysconf("SC_CLK_TCK")
    times = read_cpu_times([1, 0], str(path))
    # cpu1's row first: user nice system idle iowait irq softirq steal, in clock ticks over the tick rate
    np.testing.assert_allclose(times[0], np.array([200, 2, 30, 2000, 7, 8, 9, 10]) / hz)
    np.testing.assert_allclose(times[1], np.array([100, 1, 20, 1000, 3, 4, 5, 6]) / hz)
    # an old kernel's short row: the missing columns read 0
    np.testing.assert_allclose(read_cpu_times([2], str(path))[0], np.array([300, 3, 0, 0, 0, 0, 0, 0]) / hz)


def test_read_cpu_times_is_none_for_a_cpu_it_lacks_or_a_file_it_cannot_read(tmp_path):
    path = tmp_path / "stat"
    path.write_text(STAT)
    assert read_cpu_times([0, 3], str(path)) is None
    assert read_cpu_times([0], str(tmp_path / "missing")) is None


def test_shares_by_hand():
    # two CPUs over 10 s (capacity 20 CPU-seconds); the deltas summed over both CPUs:
    # user 13, nice 1, system 2, idle 2, iowait 0.5, irq 0.2, softirq 0.3, steal 1; this process used 12
    before = np.zeros((2, 8))
    after = np.array([[8, 1, 1, 1, 0.5, 0.2, 0.0, 0.4], [5, 0, 1, 1, 0.0, 0.0, 0.3, 0.6]])
    shares = cpu_shares(before + 7.0, after + 7.0, own_s=12.0, wall_s=10.0)
    assert shares == pytest.approx({"own": 0.6, "other": 0.2, "irq": 0.025, "steal": 0.05, "idle": 0.125})
    assert sum(shares.values()) == pytest.approx(1.0)
    assert tuple(shares) == cpu_accounting.SHARE_NAMES
    # the two clocks tick apart: this process's time above the CPUs' user and system leaves no negative share
    assert cpu_shares(before, after, own_s=17.0, wall_s=10.0)["other"] == 0.0


def test_shares_between_needs_two_readings_of_the_same_cpus():
    times = np.zeros((1, 8))
    later = np.array([[1.0, 0, 0, 1.0, 0, 0, 0, 0]])
    ok = shares_between(CpuSample((0,), times, 0.0, 0.0), CpuSample((0,), later, 1.0, 2.0))
    assert ok == pytest.approx({"own": 0.5, "other": 0.0, "irq": 0.0, "steal": 0.0, "idle": 0.5})
    assert shares_between(CpuSample((0,), None, 0.0, 0.0), CpuSample((0,), later, 1.0, 2.0)) is None
    assert shares_between(CpuSample((0,), times, 0.0, 0.0), CpuSample((1,), later, 1.0, 2.0)) is None


@pytest.mark.serial
def test_a_thread_spinning_on_a_cpu_shows_as_this_process_on_that_cpu():
    """Smoke test of the live counters on this machine's first CPU: the shares account for the whole stretch and
    a spinning thread of this process shows as this process's (another process may share the CPU)."""
    cpu = min(os.sched_getaffinity(0))
    if read_cpu_times([cpu]) is None:
        pytest.skip("no /proc/stat on this machine")
    saved = os.sched_getaffinity(0)
    stop = threading.Event()

    def spin() -> None:
        os.sched_setaffinity(0, {cpu})
        while not stop.is_set():
            pass

    os.sched_setaffinity(0, {cpu})  # this thread too: every thread of the process on the sampled CPU
    try:
        spinner = threading.Thread(target=spin)
        first = cpu_accounting.sample([cpu])
        spinner.start()
        time.sleep(1.0)
        stop.set()
        spinner.join()
        shares = shares_between(first, cpu_accounting.sample([cpu]))
    finally:
        os.sched_setaffinity(0, saved)
    assert shares is not None
    assert sum(shares.values()) == pytest.approx(1.0, abs=0.1)
    assert shares["own"] > 0.2 and shares["idle"] < 0.5
