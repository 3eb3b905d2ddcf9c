"""The notebooks under notebooks/: committed without outputs, and each one executes without error (a fresh kernel
from ipykernel, offline), its tagged cells producing their rich outputs (``expect-html``: an HTML view,
``expect-image``: a plot)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
#: what each tag asks a cell's outputs to hold
EXPECT = {"expect-html": "text/html", "expect-image": "image/png"}


def test_there_are_notebooks() -> None:
    names = [p.stem for p in NOTEBOOKS]
    assert len(names) >= 4, names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, (
                f"{path.name}: cell {cell.get('id')} carries outputs; strip them (e.g. `jupyter nbconvert "
                "--clear-output --inplace`)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_with_rich_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    t = time.perf_counter()
    nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    seconds = time.perf_counter() - t
    tagged = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert not errors, f"{path.name} cell {cell.get('id')}: {errors[0].ename}: {errors[0].evalue}"
        kinds = {k for o in cell.outputs for k in o.get("data", {})}
        for tag in cell.metadata.get("tags", []):
            if tag in EXPECT:
                tagged += 1
                assert EXPECT[tag] in kinds, f"{path.name} cell {cell.get('id')} ({tag}) produced {sorted(kinds)}"
        for o in cell.outputs:
            html = o.get("data", {}).get("text/html", "")
            assert "<script" not in html.lower(), f"{path.name} cell {cell.get('id')}: JavaScript in an HTML view"
    assert tagged, f"{path.name} has no cell tagged with an expected rich output"
    assert seconds < 120, f"{path.name} took {seconds:.0f} s to execute (the budget is under 2 minutes)"
