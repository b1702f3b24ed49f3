"""bench/gpu_table.py: the GPU table's cells, its refusals at once, and a dry run on the CPU
(PyTorch is never needed: its cells say why they are empty)."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import gpu_table

ROOT = Path(__file__).parent.parent


def run_table(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_table.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


def test_the_table_gives_each_figure_or_why_not_and_ours_over_the_best_pytorch():
    rows = [
        (
            "resnet50, batch 256, 224 px",
            {
                "ours": {"img_s": 6869.4, "compile_s": 14.04},
                "eager": {"img_s": 4677.0, "first_step_s": 3.2},
                "compile": {"img_s": 6749.0, "first_step_s": 49.0},
            },
        ),
        (
            "resnet20, batch 128, 32 px",
            {"ours": {"error": "over 600 s"}, "eager": {"img_s": 13031.2, "first_step_s": 1.0}},
        ),
        ("resnet20, batch 8, 16 px", {"ours": {"img_s": 57.25, "compile_s": 7.3}}),
    ]
    assert gpu_table.table(rows).splitlines() == [
        "| train step | ours | PyTorch eager (AMP, channels_last) | "
        "torch.compile (AMP, channels_last) | ours ÷ best PyTorch | "
        "compile s (torch.compile: its first step) |",
        "|---|---|---|---|---|---|",
        "| resnet50, batch 256, 224 px | 6,869 img/s | 4,677 | 6,749 | 1.02 | "
        "ours 14.0, torch.compile 49.0 |",
        "| resnet20, batch 128, 32 px | over 600 s | 13,031 | not run | - |  |",
        "| resnet20, batch 8, 16 px | 57.2 img/s | not run | not run | - | ours 7.3 |",
    ]


def test_the_setting_names_the_card_the_versions_and_the_method():
    rows = [
        (
            "resnet50",
            {
                "ours": {"device": "NVIDIA H200", "versions": {"jax": "0.11.2"}},
                "eager": {"device": "NVIDIA H200", "versions": {"torch": "2.11.0+cu130"}},
                "compile": {"error": "no PyTorch"},
            },
        )
    ]
    assert gpu_table.setting(rows, 20, 3) == (
        "On NVIDIA H200; jax 0.11.2, torch 2.11.0+cu130; 20 steps queued, then one "
        "synchronisation, median of 3 windows."
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rows", "resnet20,vgg16"], "--rows knows ['resnet50', 'vit_small_patch16_224', "),
        (["--measure", "ours"], "--measure times one network: give it as --rows"),
        (["--torch-python", "/no/python"], "--torch-python /no/python: no such program"),
    ],
)
def test_what_it_cannot_do_is_refused_at_once(args, message):
    result = run_table(*args)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"gpu_table.py: {message}") and result.stderr.count("\n") == 1


@pytest.mark.slow  # a process compiles a tiny ResNet-20's train step
def test_a_dry_run_on_the_cpu_fills_ours_and_says_why_a_cell_is_empty():
    result = run_table(
        *("--rows", "resnet20", "--batch", "2", "--size", "8", "--steps", "1", "--windows", "1"),
        *("--no-compile", "--torch-python", sys.executable),
    )
    assert result.returncode == 0, result.stderr
    setting, _, _, _, row = result.stdout.splitlines()
    assert setting.startswith("On cpu; jax ")
    label, ours, eager, compiled, ratio, seconds = row.strip("| ").split(" | ")
    assert label == "resnet20, batch 2, 8 px" and re.fullmatch(r"[\d,.]+ img/s", ours)
    if importlib.util.find_spec("torch") is None:  # its own process failed; the table did not
        assert eager == "ModuleNotFoundError: No module named 'torch'" and ratio == "-"
    assert compiled == "not run" and re.fullmatch(r"ours [\d.]+", seconds)
