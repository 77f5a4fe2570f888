"""Folders of the repository checkout that the library reads: ``results/`` (measurements committed
from the H200 and CPU runs) and ``figures/``. They are not package data: the notebooks and tools run
from a checkout (``pip install -e .``), and a reader of a missing file gets a FileNotFoundError
naming the path."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "results"
FIGURES_DIR = REPO_ROOT / "figures"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"

__all__ = ["FIGURES_DIR", "NOTEBOOKS_DIR", "REPO_ROOT", "RESULTS_DIR"]
