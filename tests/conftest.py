"""A strict test environment: four CPU devices so sharding code runs in CI, no GPU needed.

On a GPU, `JAX_PLATFORMS=cuda pytest -m "not slow"`: the tests marked `cpu_only` skip, saying
why, and float32 matrix products and convolutions run at full precision (docs/performance.md's
"The test suite on a GPU").
"""

import gc
import importlib.metadata
import os

import pytest

# Tests check numbers, not speed: XLA's backend optimisations cost ~35% of compile time on CPU.
FLAGS = "--xla_force_host_platform_device_count=4 --xla_backend_optimization_level=0"
# XLA:CPU's fusion emitters (jaxlib 0.10's default) compile a small network's gradient in ~2.5x
# the time of its older elemental emitters (EfficientNet-B0's tiny training step: 6.9 s against
# 2.8 s of CPU). XLA aborts on a flag it does not know, so only on the jaxlib it was measured on.
FAST_COMPILE = "--xla_cpu_use_fusion_emitters=false"


def _jaxlib_0_10() -> bool:
    try:
        return importlib.metadata.version("jaxlib").startswith("0.10.")
    except importlib.metadata.PackageNotFoundError:
        return False


os.environ.setdefault("JAX_PLATFORMS", "cpu")
ON_CPU = os.environ["JAX_PLATFORMS"] == "cpu"
# XLA's GPU backend refuses optimisation level 0 ("doesn't support unoptimized code generation").
CPU_FLAGS = [FLAGS, *([FAST_COMPILE] if _jaxlib_0_10() else [])] if ON_CPU else []
os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *CPU_FLAGS]).strip()
if not ON_CPU:
    # A GPU's float32 products and convolutions default to TensorFloat-32 (operands rounded to
    # 10-bit mantissas, 5e-4 each), past the 1e-4 the parity checks allow the logits and the 1e-5
    # of the building blocks'. Through the environment: the programs the tests start alike.
    os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")
    # Each test process (pytest-xdist's workers, the programs run as subprocesses) takes memory
    # as it needs it, not 75% of the GPU's at its start.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# The partitionable threefry takes ~3x longer to compile on CPU (11.6 s against 3.7 s to initialise
# a small ResNet-18); its values differ, but both are independent of sharding.
os.environ.setdefault("JAX_THREEFRY_PARTITIONABLE", "0")

# Tracing allocates objects by the million: at Python's default of a young-generation collection
# every 700 allocations, the collector took ~13% of the CPU of tracing tests (test_mobilenet and
# test_inception: 7.2 of 52 s; 2.2 s at 20,000, for 5% more peak memory).
gc.set_threshold(20_000, 10, 10)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """A finished `helpers.TINY_RUN` with a checkpoint at each of its 3 steps: the run that
    eval.py's and export.py's tests read, trained once for the session (`helpers.made_once`)."""
    from tests.helpers import made_once, train_tiny_run

    def make(folder):
        train_tiny_run(folder, "train.checkpoint_every=1", "train.keep_checkpoints=3")

    return made_once(tmp_path_factory, "tiny_run", make)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cpu_only(reason): needs JAX's CPU backend; skipped, with its reason, on others"
    )


def pytest_collection_modifyitems(config, items):
    # The slow tier's tests (up to ~45 s each) first, in their order: pytest-xdist's worksteal
    # deals each worker a run of the list and steals from its end, so both workers end on short
    # tests instead of one waiting out the other's last long test (~25 s of the suite's wall).
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if ON_CPU:
        return
    for item in items:
        if (mark := item.get_closest_marker("cpu_only")) is not None:
            item.add_marker(pytest.mark.skip(reason=f"CPU only: {mark.args[0]}"))
