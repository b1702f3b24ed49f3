"""The example notebook runs top to bottom, as a newcomer would run it."""

from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"


def test_committed_notebook_has_no_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, cell.source[:60]


def test_quickstart_notebook_runs(monkeypatch):
    # A laptop's setting: one device and XLA's optimisations (conftest's XLA_FLAGS make the
    # notebook's training ten times slower).
    monkeypatch.setenv("XLA_FLAGS", "")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT / "examples")}},
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on any error
    outputs = [o for cell in notebook.cells for o in cell.get("outputs", [])]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 4  # feature maps, curves, confusion matrix, drawn digits
    text = "".join(o.get("text", "") for o in outputs)
    assert "test top-1:" in text and "drawn digits recognised" in text
