"""A strict test environment: four CPU devices so sharding code runs in CI, no GPU needed."""

import gc
import importlib.metadata
import os

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
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", ""), FLAGS, *([FAST_COMPILE] if _jaxlib_0_10() else [])]
).strip()
# The partitionable threefry takes ~3x longer to compile on CPU (11.6 s against 3.7 s to initialise
# a small ResNet-18); its values differ, but both are independent of sharding.
os.environ.setdefault("JAX_THREEFRY_PARTITIONABLE", "0")

# Tracing allocates objects by the million: at Python's default of a young-generation collection
# every 700 allocations, the collector took ~13% of the CPU of tracing tests (test_mobilenet and
# test_inception: 7.2 of 52 s; 2.2 s at 20,000, for 5% more peak memory).
gc.set_threshold(20_000, 10, 10)
