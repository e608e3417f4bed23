"""benchmark/machine.py's keyed JSON files: one script's entry replaced, the others kept."""

from __future__ import annotations

import json

from benchmark.machine import write_json_entry


def test_an_entry_is_set_and_the_other_entries_are_kept(tmp_path):
    path = tmp_path / "checks" / "parity.json"
    write_json_entry(path, "go1", {"max": 1.0})
    write_json_entry(path, "go2", {"max": 2.0})
    write_json_entry(path, "go1", {"max": 3.0})
    assert json.loads(path.read_text()) == {"go1": {"max": 3.0}, "go2": {"max": 2.0}}
    assert [p.name for p in path.parent.iterdir()] == ["parity.json"]  # no temporary file left beside it
