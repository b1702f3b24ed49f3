"""The benchmarks' command lines refuse what they cannot do before any compiling starts."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the benchmarks run as subprocesses

ROOT = Path(__file__).parent.parent


def run_bench(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="PyTorch is installed")
def test_train_step_torch_without_pytorch_is_one_line_at_once():
    result = run_bench("train_step.py", "resnet50", "--torch")
    assert result.returncode == 1
    assert result.stderr == (
        "train_step.py: --torch needs PyTorch, which is not installed: pip install torch\n"
    )
    assert result.stdout == ""  # nothing was built or timed


def test_cpu_table_refuses_unknown_rows_at_once():
    result = run_bench("cpu_table.py", "--rows", "resnet20,vgg16")
    assert result.returncode == 1
    assert result.stderr == (
        "cpu_table.py: --rows knows ['resnet18', 'resnet50', 'resnet20', 'resnet56'], "
        "not ['vgg16']\n"
    )
    assert result.stdout == ""
