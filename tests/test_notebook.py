"""The example notebook runs top to bottom, as a newcomer would run it."""

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"


def test_committed_notebook_has_no_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, cell.source[:60]


# The notebook's training and fine-tuning, and the same on fewer steps, with the evaluations spread
# over them: every cell runs the code a reader runs.
SHORTER = {
    '["train.epochs=8", "train.eval_every=60"]': '["train.epochs=1", "train.eval_every=15"]',
    '"train.epochs=1", "train.eval_every=20"]': '"train.steps=4", "train.eval_every=2"]',
}


@pytest.mark.slow  # a kernel that trains twice
def test_quickstart_notebook_runs(monkeypatch):
    # One device, as on a laptop; conftest's other XLA flags, which save the notebook more compile
    # time than they cost its training (the backend optimisations alone ~8 of its ~40 CPU s).
    flags = [f for f in os.environ["XLA_FLAGS"].split() if "device_count" not in f]
    monkeypatch.setenv("XLA_FLAGS", " ".join(flags))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    for settings, shorter in SHORTER.items():
        cells = [cell for cell in notebook.cells if settings in cell.source]
        assert len(cells) == 1, f"no cell (or several) runs with {settings}: update SHORTER"
        cells[0].source = cells[0].source.replace(settings, shorter)
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
