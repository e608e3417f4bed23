"""Describe the machine and library versions a benchmark ran on, and write results."""

from __future__ import annotations

import csv
import datetime as _dt
import importlib.metadata
import json
import os
import platform
from pathlib import Path

OUTPUTS = Path(__file__).resolve().parent / "outputs"


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (platform.processor() as a fallback)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def gpu_name() -> str | None:
    """The CUDA device name when torch is already imported and sees one (never imports torch)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return None


def parse_cpus(text: str | None) -> list[int]:
    """'0-15' or '1,3,5-7' -> ids; None or '' -> every CPU available to the process."""
    if not text:
        return sorted(os.sched_getaffinity(0))
    ids: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        ids.extend(range(int(lo), int(hi or lo) + 1))
    return ids


def machine_info() -> dict:
    """CPU model, core counts, this process's affinity, Python and library versions, date."""
    versions = {}
    for dist in ["numpy", "mujoco", "mujoco-uni-runtime", "gymnasium", "torch"]:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "hostname": platform.node(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "gpu": gpu_name(),
        "python": platform.python_version(),
        "versions": versions,
    }


def write_results(name: str, rows: list[dict], meta: dict, out_dir: str | os.PathLike | None = None) -> Path:
    """Write `<out>/<name>.json` (meta + rows) and `<out>/<name>.csv` (rows); return the folder."""
    folder = Path(out_dir) if out_dir else OUTPUTS / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps({"machine": machine_info(), **meta, "rows": rows}, indent=2) + "\n")
    if rows:
        keys = list(dict.fromkeys(k for row in rows for k in row))
        with open(folder / f"{name}.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(rows)
    return folder


def write_json_entry(path: str | os.PathLike, key: str, value: dict) -> Path:
    """Set `key` of the JSON object in `path` to `value`, keeping its other keys (a file of several measurements,
    each remade by its own script); the file is replaced whole, never left half written."""
    path = Path(path)
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)
    return path
