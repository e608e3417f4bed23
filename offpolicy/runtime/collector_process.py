"""One lifecycle path for every way a run can end.

`CollectorProcess` starts the collector with the `spawn` context, runs the
handshake and is asked, from inside every blocking wait of the learner, whether
the collector is still healthy (`check`). Any failure becomes a `RunFailure`
that names the side and the cause; the runner then calls `stop`, which always
takes the same steps: raise the stop flag and wake every waiter, give the
collector a short grace period to leave on its own, dump its stack if it hung
(SIGUSR1 -> faulthandler) and SIGKILL it if it is still there, reap it. The
parent unlinks the shared segment right after the handshake, so nothing of it
can outlive the processes.

Exit statuses of `python -m offpolicy.train` (`offpolicy.exit_status.ExitStatus`, documented in `offpolicy.train`):
0 finished; 3 collector failed (raised, died, hung past `runtime.collector_timeout_s`
or failed to start); 4 learner failed; 130 interrupted by SIGINT; 143 by SIGTERM.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import types
from contextlib import contextmanager
from typing import Any

from offpolicy.exit_status import ExitStatus
from offpolicy.runtime.collector import THREAD_CAP_VARS, CollectorConfig, collector_main
from offpolicy.runtime.slots import COLLECTOR_STATE, PRODUCED, STOP, CollectorState, Layout, SharedSegment


class RunFailure(Exception):
    """A run that ended abnormally: which side, what happened, and the details (a traceback)."""

    exit_code: int = ExitStatus.ERROR

    def __init__(self, side: str, cause: str, detail: str = "", tick: int | None = None) -> None:
        self.side = side
        self.cause = cause
        self.detail = detail
        self.tick = tick
        self.checkpoint: str | None = None
        """the final checkpoint written on the way out (the learner state was intact), if any"""
        self.stopped: str = "the learner state was intact"
        """how the learner stopped, said with the checkpoint (e.g. between two updates of its phase)"""
        self.no_checkpoint: str | None = None
        """why no final checkpoint was written, if none was"""
        super().__init__(self.headline())

    def headline(self) -> str:
        at = f" at tick {self.tick}" if self.tick is not None and self.tick >= 0 else ""
        return f"{self.side} {self.cause}{at}"

    def report(self) -> str:
        """The message printed at exit: one headline, what became of the learner state, then the traceback."""
        text = f"[offpolicy] run failed: {self.headline()}"
        if self.checkpoint:
            text += f"\n[offpolicy] {self.stopped}: checkpoint {self.checkpoint}"
        elif self.no_checkpoint:
            text += f"\n[offpolicy] no final checkpoint: {self.no_checkpoint}"
        if self.detail:
            text += f"\n--- {self.side} traceback ---\n{self.detail.rstrip()}"
        return text


class CollectorFailed(RunFailure):
    """The collector raised, died, hung or could not start."""

    exit_code = ExitStatus.COLLECTOR_FAILED

    def __init__(self, cause: str, detail: str = "", tick: int | None = None) -> None:
        super().__init__("collector", cause, detail, tick)


class LearnerFailed(RunFailure):
    """The learner (this process) raised."""

    exit_code = ExitStatus.LEARNER_FAILED

    def __init__(self, cause: str, detail: str = "", tick: int | None = None) -> None:
        super().__init__("learner", cause, detail, tick)


class Interrupted(RunFailure):
    """SIGINT or SIGTERM: a clean stop on request (both sides stopped, memory released)."""

    def __init__(self, signum: int, ticks: int, env_steps: int, at_once: bool = False) -> None:
        self.signum = signum
        self.at_once = at_once
        """a second signal: stopped wherever the learner was, no checkpoint"""
        self.ticks, self.env_steps = int(ticks), int(env_steps)
        """completed ticks and env steps (those whose transitions reached replay): summary.json's counts"""
        self.exit_code = ExitStatus.SIGINT if signum == signal.SIGINT else ExitStatus.SIGTERM
        super().__init__("runner", f"interrupted by {signal.Signals(signum).name}")

    def headline(self) -> str:
        return f"{self.side} {self.cause} after {self.ticks} ticks ({self.env_steps} env steps)"

    def report(self) -> str:
        saved = f"; resume with train.resume={self.checkpoint}" if self.checkpoint else ""
        return (
            f"[offpolicy] {self.headline()}: collector stopped, shared memory released{saved}; "
            f"exit status {self.exit_code}"
        )


def _signal_name(exitcode: int) -> str:
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


@contextmanager
def _main_module_hidden():
    """Hide `__main__` from spawn while it prepares the child.

    spawn re-imports the parent's main module in the child (`__mp_main__`); whatever
    that module imports at the top (torch in a user's script, pytest, Hydra) would
    land in the collector. The collector needs nothing from `__main__`: its entry
    point and config are importable by name.
    """
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")  # no __file__, no __spec__: nothing to re-import
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


@contextmanager
def _env_for_child(values: dict[str, str]):
    """Temporarily set environment variables so a spawned child starts with them (before numpy loads)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class CollectorProcess:
    """Parent-side handle of the collector: spawn, handshake, health checks, stop."""

    def __init__(self, cfg: CollectorConfig, startup_timeout_s: float, timeout_s: float) -> None:
        self.cfg = cfg
        self.startup_timeout_s = float(startup_timeout_s)
        self.timeout_s = float(timeout_s)
        """longest a physics step may take before the collector is declared hung"""
        self.process: mp.process.BaseProcess | None = None
        self.conn = None
        self.segment: SharedSegment | None = None
        self.spec_report: dict[str, Any] = {}
        self.final_report: dict[str, Any] | None = None
        self.failure: dict[str, Any] | None = None
        self.tick = -1
        """the tick the learner is waiting on (for messages)"""
        self._deadline = float("inf")
        self._owed = (-1, float("inf"))
        """(tick, deadline): the transition of `tick` is owed by then (its actions were published)"""
        self._next_liveness_check = 0.0
        self.hung = False
        """set when the collector missed its deadline: `stop` then skips the grace period"""

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    # --- start ---------------------------------------------------------------------
    def start(self) -> dict[str, Any]:
        """Spawn the collector and wait for its env spec and isolation report."""
        ctx = mp.get_context("spawn")
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        self.conn = parent_conn
        self.process = ctx.Process(
            target=collector_main, args=(child_conn, self.cfg), name="offpolicy-collector", daemon=True
        )
        with _env_for_child({v: "1" for v in THREAD_CAP_VARS}), _main_module_hidden():
            self.process.start()
        child_conn.close()
        msg = self._recv("to build its env", self.startup_timeout_s)
        if msg[0] != "spec":
            raise CollectorFailed(f"sent {msg[0]!r} instead of its env spec during the handshake")
        self.spec_report = msg[1]
        return self.spec_report

    def attach(self, segment: SharedSegment, layout: Layout, ring_slots: int) -> None:
        """Hand the segment to the collector, then unlink its name: nothing can leak from here on."""
        self.segment = segment
        self.conn.send(("attach", segment.name, layout, ring_slots))
        msg = self._recv("to map the shared memory", self.startup_timeout_s)
        segment.unlink()
        if msg[0] != "attached":
            raise CollectorFailed(f"sent {msg[0]!r} instead of 'attached' during the handshake")

    def _recv(self, what: str, timeout_s: float) -> tuple:
        deadline = time.monotonic() + timeout_s
        while not self.conn.poll(0.05):
            if not self.process.is_alive():
                self._raise_dead(f"while waiting for it {what}")
            if time.monotonic() > deadline:
                raise CollectorFailed(f"did not answer within {timeout_s:.1f} s while waiting for it {what}")
        try:
            msg = self.conn.recv()
        except (EOFError, OSError):
            self._raise_dead(f"while waiting for it {what}")
        if msg[0] == "error":
            self._raise_error(msg[1])
        return msg

    # --- health checks (called from the learner's waits) ----------------------------
    def arm_deadline(self, tick: int) -> None:
        """The collector now owes observations of `tick` within `timeout_s`."""
        self.tick = tick
        self._deadline = time.monotonic() + self.timeout_s

    def actions_published(self, tick: int) -> None:
        """The collector now owes transition `tick` within `timeout_s` (the watchdog's deadline)."""
        self._owed = (tick, time.monotonic() + self.timeout_s)

    def problem(self) -> bool:
        """Whether the collector died, failed or owes a transition past its deadline (never blocks; any thread)."""
        if self.process is None:
            return False
        if mp.connection.wait([self.process.sentinel], 0):
            return not self.finished()
        if self.segment is not None and self.segment.control is not None:
            control = self.segment.control
            if control[COLLECTOR_STATE] == CollectorState.FAILED:
                return True
            tick, deadline = self._owed
            if int(control[PRODUCED]) <= tick and time.monotonic() > deadline:
                return True
        return False

    def finished(self) -> bool:
        """It produced every tick of the run and exited with status 0: a normal end, not a failure.

        The collector leaves as soon as its last transition is written, which can be while the
        learner is still inside that tick's update phase or writing its last metrics row.
        """
        control = self.segment.control if self.segment is not None else None
        return self.process.exitcode == 0 and control is not None and int(control[PRODUCED]) >= self.cfg.num_ticks

    def check_now(self, when: str) -> None:
        """`check` without its rate limit, plus the owed-transition deadline (the learner's safe points and
        the watchdog's interrupt); `when` says where the learner was."""
        self._next_liveness_check = 0.0
        self.check(when)
        tick, deadline = self._owed
        control = self.segment.control if self.segment is not None else None
        if control is not None and int(control[PRODUCED]) <= tick and time.monotonic() > deadline:
            self.hung = True
            self._dump_stack()
            raise CollectorFailed(
                f"hung: tick {tick} did not finish within {self.timeout_s:.1f} s (runtime.collector_timeout_s); "
                f"its stack was dumped to stderr above"
            )

    def check(self, when: str = "while the learner waited for it") -> None:
        """Raise `CollectorFailed` if the collector failed, died or is past its deadline; `when` says where
        the learner was (`... was killed by SIGKILL <when>`)."""
        if self.segment is not None and self.segment.control[COLLECTOR_STATE] == CollectorState.FAILED:
            self._raise_error(self._collect_error(1.0))
        now = time.monotonic()
        if now < self._next_liveness_check:
            return
        self._next_liveness_check = now + 0.02
        if self.process.exitcode is not None and not self.finished():
            self._raise_dead(when)
        if now > self._deadline:
            self.hung = True
            self._dump_stack()
            what = f"tick {self.tick - 1} did not finish" if self.tick > 0 else "no first observation"
            raise CollectorFailed(
                f"hung: {what} within {self.timeout_s:.1f} s (runtime.collector_timeout_s); "
                f"its stack was dumped to stderr above"
            )

    def _collect_error(self, timeout_s: float) -> dict[str, Any] | None:
        if self.failure is not None:
            return self.failure
        try:
            while self.conn.poll(timeout_s):
                msg = self.conn.recv()
                if msg[0] == "error":
                    self.failure = msg[1]
                    return self.failure
                if msg[0] == "bye":
                    self.final_report = msg[1]
        except (EOFError, OSError):
            pass
        return None

    def _raise_error(self, failure: dict[str, Any] | None) -> None:
        if failure is None:
            raise CollectorFailed("failed without sending a report", tick=self.tick)
        raise CollectorFailed(
            f"raised {failure['type']}: {failure['message']}", detail=failure["traceback"], tick=failure["tick"]
        )

    def _raise_dead(self, when: str) -> None:
        self.process.join(0.5)
        code = self.process.exitcode
        failure = self._collect_error(0.2)
        if failure is not None:
            self._raise_error(failure)
        how = f"was killed by {_signal_name(code)}" if code is not None and code < 0 else f"exited with status {code}"
        at = f" at tick {self.tick}," if self.tick >= 0 else ""  # before `when`, which may run on
        raise CollectorFailed(f"process {self.process.pid} {how}{at} {when}")

    def _dump_stack(self) -> None:
        if self.process is not None and self.process.is_alive():
            print(f"--- stack of the hung collector (pid {self.process.pid}) ---", file=sys.stderr, flush=True)
            try:
                os.kill(self.process.pid, signal.SIGUSR1)
                time.sleep(0.3)
            except ProcessLookupError:
                pass

    # --- stop -----------------------------------------------------------------------
    def stop(self, grace_s: float = 3.0) -> None:
        """Stop the collector (flag, grace period, SIGKILL), reap it, close the pipe. Idempotent."""
        if self.segment is not None and self.segment.control is not None:
            self.segment.control[STOP] = 1
            self.segment.wake_all()
        proc = self.process
        if proc is not None and proc.pid is not None:  # None: it never started
            if self.conn is not None and proc.is_alive() and self.segment is None:
                try:  # still in the handshake: tell it to leave
                    self.conn.send(("stop",))
                except (OSError, BrokenPipeError):
                    pass
            proc.join(0.0 if self.hung else grace_s)
            if proc.is_alive():
                proc.kill()
                proc.join(5.0)
            if self.conn is not None:
                self._collect_error(0.0)
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.segment is not None:
            self.segment.unlink()


WATCHDOG_SIGNAL = signal.SIGUSR2
"""sent by the watchdog thread to the main thread to interrupt whatever the learner is doing"""


class Watchdog:
    """Notices a dead, failed or hung collector while the learner is busy, within `period_s`.

    The learner checks the collector inside every wait, but a long phase (an update phase,
    the first one with its compile warm-up, a checkpoint write) runs without waiting. This
    thread polls `collector.problem()` (the process sentinel, the collector's state word,
    the transition it owes) and, when it sees one, sets the learner's `safe_stop` event:
    the learner then stops at its next safe point (between two updates of an eager update
    phase, after a captured one, in a wait, at a tick boundary) and raises the collector's
    `CollectorFailed` there, its state intact, so the runner writes the final checkpoint.
    A learner that reaches no safe point within `learner.safe_point_grace_s()` (a compile
    warm-up, a phase that cannot stop inside) is interrupted instead: `WATCHDOG_SIGNAL` to
    the main thread, whose handler raises the failure wherever the learner was (a blocking
    call returns early on the signal), saying that no safe point came in time. After
    `stop`, a late signal is ignored.
    """

    def __init__(self, collector: CollectorProcess, period_s: float = 0.1) -> None:
        self.collector = collector
        self.period_s = float(period_s)
        self.fired = 0
        """signals sent to the main thread"""
        self._watching = False
        """False while a signal is being handled (one at a time) and after `stop`"""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous_handler: Any = None
        self._main = threading.main_thread().ident
        self._learner: Any = None
        self._asked: tuple[float, float] | None = None
        """(when the learner was asked to stop at a safe point, how long it may take), while it is asked"""

    def start(self, learner: Any) -> None:
        """Install the handler (main thread only) and start polling on behalf of `learner`.

        `learner` has `safe_stop` (a threading.Event it checks at its safe points), `activity`
        (where it is, as `while ...` for the message) and `safe_point_grace_s()`.
        """
        self._learner = learner
        self._previous_handler = signal.signal(WATCHDOG_SIGNAL, self._on_signal)
        self._watching = True
        self._thread = threading.Thread(target=self._poll, name="offpolicy-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching, join the thread and restore the previous handler. Idempotent."""
        self._watching = False
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
            self._thread = None
        if self._previous_handler is not None:
            signal.signal(WATCHDOG_SIGNAL, self._previous_handler)
            self._previous_handler = None

    def _poll(self) -> None:
        safe_stop = self._learner.safe_stop
        while not self._stop.wait(self.period_s):
            if not self._watching:
                continue
            if self._asked is None:
                if self.collector.problem():
                    self._asked = (time.monotonic(), float(self._learner.safe_point_grace_s()))
                    safe_stop.set()
            elif not safe_stop.is_set():  # the learner looked at a safe point and found nothing wrong
                self._asked = None
            elif time.monotonic() - self._asked[0] > self._asked[1]:
                self._watching = False
                self.fired += 1
                signal.pthread_kill(self._main, WATCHDOG_SIGNAL)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._stop.is_set():
            return
        safe_stop = self._learner.safe_stop
        if safe_stop.is_set():  # still no safe point: stop the learner where it is
            safe_stop.clear()
            grace = self._asked[1] if self._asked is not None else 0.0
            # raises CollectorFailed naming what happened, where the learner was, and that it could not stop there
            self.collector.check_now(f"{self._learner.activity}, which reached no safe point within {grace:.1f} s")
        # the learner took the request at a safe point meanwhile, or the collector recovered: keep watching
        self._asked = None
        self._watching = True
