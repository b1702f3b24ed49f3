"""ruff, as configured in pyproject.toml, holds for the whole tree: lint and format."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]])
def test_ruff_passes(command):
    ruff = shutil.which("ruff")
    assert ruff, "ruff is in the test extra: pip install -e '.[test]'"
    result = subprocess.run([ruff, *command, "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
