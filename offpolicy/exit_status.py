"""The exit statuses of every command-line entry point (`docs/design.md`, "Exit statuses", says when each occurs)."""

from __future__ import annotations

import enum


class ExitStatus(enum.IntEnum):
    """How a command ended; the numbers are part of the interface and never change."""

    OK = 0
    """finished"""
    ERROR = 1
    """an unexpected error that no status below covers (its traceback is printed)"""
    NOTHING_TO_PLOT = 1
    """`offpolicy.plot`: no run under the directory has the metric (an alias of ERROR)"""
    INVALID_CONFIG = 2
    """a bad config key, task option, CPU id or sweep plan, or a bad command-line argument"""
    COLLECTOR_FAILED = 3
    """the collector raised, died, hung past its timeout or could not start"""
    LEARNER_FAILED = 4
    """the learner raised, or too many updates in a row had non-finite losses"""
    BAD_CHECKPOINT = 5
    """a checkpoint that is missing, unreadable, unsafe or made for another run"""
    VIDEO_FAILED = 6
    """`offpolicy.eval`: the video could not be rendered or written (the returns were)"""
    SIGINT = 130
    """stopped by SIGINT (128 + its signal number, as a shell reports it)"""
    SIGTERM = 143
    """stopped by SIGTERM (128 + its signal number)"""
