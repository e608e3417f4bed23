"""The exit statuses docs/design.md documents are the members of `offpolicy.exit_status.ExitStatus`."""

from __future__ import annotations

import re
from pathlib import Path

from offpolicy.exit_status import ExitStatus

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design.md"

TRAIN_ROWS = {
    "finished": [ExitStatus.OK],
    "an unexpected error": [ExitStatus.ERROR],
    "invalid config": [ExitStatus.INVALID_CONFIG],
    "the collector failed": [ExitStatus.COLLECTOR_FAILED],
    "the learner raised": [ExitStatus.LEARNER_FAILED],
    "`train.resume` names a checkpoint": [ExitStatus.BAD_CHECKPOINT],
    "stopped by SIGINT": [ExitStatus.SIGINT, ExitStatus.SIGTERM],
}
"""the opening words of each row of the `offpolicy.train` table -> the statuses in its first column"""

LISTS = {
    "offpolicy.eval": {
        "done": ExitStatus.OK,
        "an unexpected error": ExitStatus.ERROR,
        "invalid config": ExitStatus.INVALID_CONFIG,
        "bad checkpoint": ExitStatus.BAD_CHECKPOINT,
        "the video could not": ExitStatus.VIDEO_FAILED,
    },
    "offpolicy.export": {
        "done": ExitStatus.OK,
        "an unexpected error": ExitStatus.ERROR,
        "invalid config": ExitStatus.INVALID_CONFIG,
        "bad checkpoint": ExitStatus.BAD_CHECKPOINT,
    },
    "offpolicy.plot": {
        "done": ExitStatus.OK,
        "nothing to plot": ExitStatus.NOTHING_TO_PLOT,
        "a bad argument": ExitStatus.INVALID_CONFIG,
    },
}
"""the `<status> <meaning>; ...` lists after the table: command -> opening words -> status"""


def exit_section() -> str:
    text = DESIGN.read_text()
    return text.split("## Exit statuses", 1)[1].split("\n## ", 1)[0]


def train_table() -> dict[str, list[int]]:
    """The table's rows: meaning -> the statuses in the first column (`130 / 143` is two)."""
    rows = {}
    for line in exit_section().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and re.fullmatch(r"\d+( / \d+)*", cells[0]):
            rows[cells[1]] = [int(n) for n in cells[0].split(" / ")]
    return rows


def status_list(command: str) -> list[tuple[int, str]]:
    """`python -m <command>`: 0 done; 1 ...: the (status, meaning) pairs of that paragraph."""
    flat = " ".join(exit_section().split())
    body = flat.split(f"`python -m {command}`:", 1)[1].split("`python -m", 1)[0]
    return [(int(m.group(1)), m.group(2)) for m in re.finditer(r"(?:^|;)\s*(\d+) ([^;]+)", body)]


def test_every_row_of_the_train_table_is_the_enum_member_of_its_meaning():
    rows = train_table()
    assert len(rows) == len(TRAIN_ROWS), rows
    for opening, members in TRAIN_ROWS.items():
        (meaning,) = [m for m in rows if m.startswith(opening)]
        assert rows[meaning] == [int(m) for m in members], meaning


def test_the_eval_and_plot_statuses_are_the_enum_members_of_their_meanings():
    for command, expected in LISTS.items():
        documented = status_list(command)
        assert len(documented) == len(expected), documented
        for opening, member in expected.items():
            (status,) = [s for s, meaning in documented if meaning.startswith(opening)]
            assert status == member, (command, opening)


def test_every_enum_value_is_documented():
    documented = {s for statuses in train_table().values() for s in statuses}
    documented |= {s for command in LISTS for s, _ in status_list(command)}
    assert documented == {int(m) for m in ExitStatus}
