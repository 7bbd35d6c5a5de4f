"""docs/notebook.ipynb runs top to bottom (executed, not just stored)."""
from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_notebook_executes_top_to_bottom() -> None:
    nb = nbformat.read(DOCS / "notebook.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(DOCS)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    texts = "".join(str(o.get("data", {}).get("text/plain", "")) + str(o.get("text", "")) for o in outputs)
    assert "saturated" in texts  # the findings cell printed the saturated-worker finding
    figures = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figures) >= 3
