"""A strict test environment: four CPU devices so sharding code runs in CI, no GPU needed."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Tests check numbers, not speed: XLA's backend optimisations cost ~35% of compile time on CPU.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + " --xla_force_host_platform_device_count=4 --xla_backend_optimization_level=0"
).strip()
# The partitionable threefry takes ~3x longer to compile on CPU (11.6 s against 3.7 s to initialise
# a small ResNet-18); its values differ, but both are independent of sharding.
os.environ.setdefault("JAX_THREEFRY_PARTITIONABLE", "0")
