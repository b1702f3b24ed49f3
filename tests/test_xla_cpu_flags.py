"""nets_training.xla_cpu_flags: XLA:CPU's convolutions off YNNPACK, never over XLA_FLAGS."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nets_training import xla_cpu_flags

ROOT = Path(__file__).parent.parent
SETTING = xla_cpu_flags.SETTING


@pytest.mark.parametrize(
    "before, after",
    [
        (None, SETTING),
        ("--xla_cpu_enable_fast_math=true", f"--xla_cpu_enable_fast_math=true {SETTING}"),
        (f"{xla_cpu_flags.FLAG}=+eltwise", f"{xla_cpu_flags.FLAG}=+eltwise"),  # the user's stays
    ],
)
def test_setting_joins_xla_flags_unless_the_user_chose(before, after, monkeypatch):
    monkeypatch.setattr(xla_cpu_flags, "_measured_jaxlib", lambda: True)
    if before is None:
        monkeypatch.delenv("XLA_FLAGS", raising=False)
    else:
        monkeypatch.setenv("XLA_FLAGS", before)
    assert xla_cpu_flags.prefer_eigen_convolutions() == (before is None or "ynn" not in before)
    assert os.environ["XLA_FLAGS"] == after


def test_unmeasured_jaxlib_gets_no_flag(monkeypatch):
    """XLA aborts on flags it does not know: other jaxlib versions are left alone."""
    monkeypatch.setattr(xla_cpu_flags, "_measured_jaxlib", lambda: False)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert not xla_cpu_flags.prefer_eigen_convolutions()
    assert "XLA_FLAGS" not in os.environ


SCRIPT = """
from nets_training import xla_cpu_flags
assert xla_cpu_flags.prefer_eigen_convolutions()
import jax, jax.numpy as jnp
conv = jax.jit(lambda x, w: jax.lax.conv_general_dilated(
    x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")))
print(conv.lower(jnp.ones((8, 16, 16, 32)), jnp.ones((3, 3, 32, 32))).compile().as_text())
"""


def test_convolutions_compile_without_ynnpack():
    """On the jaxlib it was measured on, XLA knows the flag and keeps convolutions off YNNPACK
    (without it, this 32-channel 3x3 convolution is a `__ynn_fusion`)."""
    if not xla_cpu_flags._measured_jaxlib():
        pytest.skip("the flag is only set on the jaxlib versions it was measured on")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    hlo = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=dict(env, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu"),
    ).stdout
    assert "convolution(" in hlo and "__ynn_fusion" not in hlo
