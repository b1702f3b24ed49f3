"""nets_training.host_memory: XLA:CPU's per-run temporaries come back without page faults."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a subprocess that multiplies 3000x3000 matrices (~10 CPU s)

ROOT = Path(__file__).parent.parent

# A jitted function whose temporaries (two 36 MB intermediates) are over glibc's 32 MB mmap
# threshold; prints the fewer page faults of its two runs after the first (each run ~2.5 CPU s;
# with reused memory a run faulted 0 or 8,790 pages, at most 17,580, of the 40,000 allowed).
SCRIPT = """
import resource, sys
from nets_training import host_memory
if sys.argv[1] == "reuse":
    assert host_memory.reuse_freed_memory()
import jax, jax.numpy as jnp
f = jax.jit(lambda x: jnp.sum(jnp.sin(x) @ jnp.cos(x)))
x = jnp.ones((3000, 3000))
faults = []
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    f(x).block_until_ready()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(min(faults[1:]))
"""


def page_faults(mode: str) -> int:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", XLA_FLAGS=""),
    )
    return int(result.stdout)


def test_reused_temporaries_fault_no_pages():
    # With glibc's defaults every run faulted ~430,000 pages here; with reused memory none, or in
    # some processes ~8,600 (34 MB that XLA:CPU maps outside malloc, e.g. a matmul's scratch).
    assert page_faults("reuse") < 40_000
