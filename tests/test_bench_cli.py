"""The benchmarks' command lines refuse what they cannot do before any compiling starts."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="PyTorch is installed")
def test_train_step_torch_without_pytorch_is_one_line_at_once():
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "train_step.py"), "resnet50", "--torch"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert result.returncode == 1
    assert result.stderr == (
        "train_step.py: --torch needs PyTorch, which is not installed: pip install torch\n"
    )
    assert result.stdout == ""  # nothing was built or timed
