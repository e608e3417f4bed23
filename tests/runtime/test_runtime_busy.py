"""The busy fraction counts an update phase's device time once its end event completed, never blocking."""

from __future__ import annotations

import torch

from offpolicy.runtime.metering import LearnerMeter


class FakeEvent:
    """Stands in for torch.cuda.Event: `query()` says whether it completed; times in ms."""

    def __init__(self, t_ms: float, done: bool) -> None:
        self.t_ms, self.done = t_ms, done

    def query(self) -> bool:
        return self.done

    def elapsed_time(self, end: FakeEvent) -> float:
        assert end.done, "elapsed_time on an incomplete event would block"
        return end.t_ms - self.t_ms


def test_completed_update_events_are_counted_once_and_pending_ones_kept():
    meter = LearnerMeter(segment=None, device=torch.device("cpu"))
    finished = (FakeEvent(0.0, True), FakeEvent(9.0, True))
    running = (FakeEvent(30.0, True), FakeEvent(39.0, False))
    meter.update_events = [finished, running]
    meter.collect_update_events()
    assert meter.busy_s["update"] == 0.009
    assert meter.update_events == [running]
    running[1].done = True
    meter.collect_update_events()
    assert abs(meter.busy_s["update"] - 0.018) < 1e-12 and meter.update_events == []
