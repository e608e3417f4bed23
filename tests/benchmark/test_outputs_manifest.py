"""The curated benchmark outputs: each folder's MANIFEST.md lists exactly what the folder holds, the docs cite
only `benchmark/outputs/` paths that exist, and no file there carries an absolute path of the machine that made
it or a raw traceback.

A manifest lists its entries as backquoted first cells of Markdown tables whose first header is `path`: a file
(`pytest_gpu.log`), a folder (`ant_fastsac_seed0/`) or a file that every listed folder holds (`*/metrics.csv`).
The files checked are those git tracks or would add (ignored files such as model weights are left out); outside
a git checkout, every file. A path cited as `<commit>:benchmark/outputs/...` names a file in the repository's
history and is not checked against the tree.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OUTPUTS = "benchmark/outputs"
DOCS = ("README.md", "benchmark/README.md", "docs/results/*.md")
ABSOLUTE = re.compile(r"(^|[^A-Za-z0-9_.~-])/(tmp|opt|work|root|home|usr)/")
CITED = re.compile(r"(?<![\w:/.-])benchmark/outputs(?:/[^\s`'\"()\[\]<>*|,;]*)?")
TRACEBACK = "Traceback (most recent call last)"


def output_files(root: Path) -> list[str]:
    """Files under `root`/benchmark/outputs that git tracks or would add, relative to `root`."""
    try:
        listing = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", OUTPUTS],
            cwd=root, capture_output=True, check=True, text=True,
        ).stdout.split("\0")  # fmt: skip
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every file
        listing = [str(p.relative_to(root)) for p in (root / OUTPUTS).rglob("*")]
    return sorted({p for p in listing if p and (root / p).is_file()})


def manifest_entries(text: str) -> list[str]:
    """The backquoted first cells of the rows of every table whose first header cell is `path`."""
    entries, in_table = [], False
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        if not cells:
            in_table = False
        elif cells[0] == "path":
            in_table = True
        elif in_table and not set(cells[0]) <= set("-: "):
            entries += re.findall(r"`([^`]+)`", cells[0])[:1]
    return entries


def folder_problems(folder: Path, files: list[str]) -> list[str]:
    """What is wrong between one output folder's manifest and `files` (paths relative to the folder)."""
    name = f"{OUTPUTS}/{folder.name}"
    if not (folder / "MANIFEST.md").is_file():
        return [f"{name}/: no MANIFEST.md"]
    entries = manifest_entries((folder / "MANIFEST.md").read_text())
    each = {e[2:] for e in entries if e.startswith("*/")}
    subfolders = {e.rstrip("/") for e in entries if e.endswith("/") and not e.startswith("*/")}
    plain = {e for e in entries if not e.endswith("/") and not e.startswith("*/")}
    problems = [f"{name}/MANIFEST.md lists {e}: not there" for e in sorted(plain) if not (folder / e).is_file()]
    for sub in sorted(subfolders):
        missing = [f for f in sorted(each) if not (folder / sub / f).is_file()]
        problems += [f"{name}/MANIFEST.md lists {sub}/: not there"] if not (folder / sub).is_dir() else []
        problems += [f"{name}/MANIFEST.md lists */{f}: not in {sub}/" for f in missing if (folder / sub).is_dir()]
    unlisted = set()
    for rel in files:
        top, _, rest = rel.partition("/")
        if rel == "MANIFEST.md" or rel in plain or (top in subfolders and rest in each):
            continue
        unlisted.add(f"{name}/{top}/: folder missing from MANIFEST.md" if rest and top not in subfolders else
                     f"{name}/{rel}: missing from MANIFEST.md")  # fmt: skip
    return problems + sorted(unlisted)


def manifest_problems(root: Path) -> list[str]:
    """Every mismatch between the output folders under `root` and their manifests."""
    by_folder: dict[str, list[str]] = {}
    problems = []
    for path in output_files(root):
        folder, _, rel = path.removeprefix(OUTPUTS + "/").partition("/")
        if not rel:
            problems.append(f"{path}: a file outside any output folder")
            continue
        by_folder.setdefault(folder, []).append(rel)
    for folder, files in sorted(by_folder.items()):
        problems += folder_problems(root / OUTPUTS / folder, files)
    return problems


def citation_problems(root: Path, doc: str) -> list[str]:
    """The `benchmark/outputs/...` paths `doc` cites that do not exist under `root`."""
    text = (root / doc).read_text()
    cited = set()
    for match in CITED.finditer(text):
        path = match.group(0)
        if text[match.end() : match.end() + 1] in ("<", "*"):  # a placeholder: check the folder it is in
            path = path[: path.rfind("/") + 1]
        cited.add(path.rstrip(".:"))
    return [f"{doc} cites {path}: not there" for path in sorted(cited) if not (root / path).exists()]


def content_problems(root: Path) -> list[str]:
    """Output files that carry an absolute path of the machine that made them, or a raw traceback."""
    problems = []
    for path in output_files(root):
        for number, line in enumerate((root / path).read_text(errors="replace").splitlines(), 1):
            if ABSOLUTE.search(line):
                problems.append(f"{path}:{number}: absolute machine path: {line.strip()[:120]}")
            if TRACEBACK in line:
                problems.append(f"{path}:{number}: raw traceback")
    return problems


def docs(root: Path) -> list[str]:
    """The pages whose citations are checked, relative to `root`."""
    return sorted(str(p.relative_to(root)) for pattern in DOCS for p in root.glob(pattern))


def test_every_output_folder_and_file_is_in_its_manifest():
    assert manifest_problems(REPO) == []


@pytest.mark.parametrize("doc", docs(REPO))
def test_docs_cite_only_outputs_that_exist(doc):
    assert citation_problems(REPO, doc) == []


def test_no_machine_paths_or_tracebacks_in_outputs():
    assert content_problems(REPO) == []


# The same checks on a small tree of their own, with the faults put in one at a time.

MANIFEST = """# outputs of a suite

| path | what |
| --- | --- |
| `*/metrics.csv` | rows |
| `run_a/` | seed 0 |
| `notes.txt` | notes |
"""


@pytest.fixture
def tree(tmp_path):
    """A clean copy: one output folder with its manifest, one run folder, one page citing both."""
    suite = tmp_path / OUTPUTS / "suite"
    (suite / "run_a").mkdir(parents=True)
    (suite / "MANIFEST.md").write_text(MANIFEST)
    (suite / "run_a" / "metrics.csv").write_text("step,return\n1,2.5\n")
    (suite / "notes.txt").write_text("made with <run dir>/checkpoints/latest.pt\n")
    (tmp_path / "pages").mkdir()
    page = "Rows: `benchmark/outputs/suite/run_a/metrics.csv`, runs in benchmark/outputs/suite/run_<k>/.\n"
    (tmp_path / "pages" / "suite.md").write_text(page + "Old: `f470913:benchmark/outputs/gone.json`.\n")
    return tmp_path


def test_a_clean_tree_has_no_problems(tree):
    assert manifest_problems(tree) == []
    assert citation_problems(tree, "pages/suite.md") == []
    assert content_problems(tree) == []


def test_a_deleted_cited_file_fails_the_page_and_the_manifest(tree):
    (tree / OUTPUTS / "suite" / "run_a" / "metrics.csv").unlink()
    assert citation_problems(tree, "pages/suite.md") == [
        "pages/suite.md cites benchmark/outputs/suite/run_a/metrics.csv: not there"
    ]
    assert manifest_problems(tree) == ["benchmark/outputs/suite/MANIFEST.md lists */metrics.csv: not in run_a/"]


def test_an_unlisted_folder_or_file_fails(tree):
    (tree / OUTPUTS / "suite" / "run_b").mkdir()
    (tree / OUTPUTS / "suite" / "run_b" / "metrics.csv").write_text("step\n")
    (tree / OUTPUTS / "suite" / "run_a" / "console.log").write_text("done\n")
    assert manifest_problems(tree) == [
        "benchmark/outputs/suite/run_a/console.log: missing from MANIFEST.md",
        "benchmark/outputs/suite/run_b/: folder missing from MANIFEST.md",
    ]


def test_a_folder_without_manifest_and_a_listed_file_that_is_gone_fail(tree):
    (tree / OUTPUTS / "other").mkdir()
    (tree / OUTPUTS / "other" / "result.json").write_text("{}\n")
    (tree / OUTPUTS / "suite" / "notes.txt").unlink()
    shutil.rmtree(tree / OUTPUTS / "suite" / "run_a")
    assert manifest_problems(tree) == [
        "benchmark/outputs/other/: no MANIFEST.md",
        "benchmark/outputs/suite/MANIFEST.md lists notes.txt: not there",
        "benchmark/outputs/suite/MANIFEST.md lists run_a/: not there",
    ]


def test_machine_paths_and_tracebacks_fail_but_placeholders_do_not(tree):
    log = tree / OUTPUTS / "suite" / "notes.txt"
    log.write_text(
        'ok: "<run dir>/x", ~/tmp/y, a/tmp/b\n"checkpoint": "/tmp/work/run/latest.pt"\nTraceback (most recent call last):\n'
    )
    assert content_problems(tree) == [
        'benchmark/outputs/suite/notes.txt:2: absolute machine path: "checkpoint": "/tmp/work/run/latest.pt"',
        "benchmark/outputs/suite/notes.txt:3: raw traceback",
    ]
