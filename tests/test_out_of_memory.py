"""train.py's line for XLA's "out of memory": what to change, among the settings the run does not
use yet (the subprocess case: tests/test_train_e2e.py)."""

import re
from pathlib import Path

import jax
import pytest

from nets_training import config, out_of_memory

DEFAULT = Path(__file__).parent.parent / "configs" / "default.yaml"
GPU_SAYS = jax.errors.JaxRuntimeError(
    "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 3221225472 bytes."
)


def line(*overrides, compute_dtype="float32"):
    return out_of_memory.explain(GPU_SAYS, config.load(DEFAULT, list(overrides)), compute_dtype)


def test_xlas_allocation_failures_are_told_from_other_errors():
    assert out_of_memory.is_out_of_memory(GPU_SAYS)
    cpu_says = "INTERNAL: Error dispatching computation: Out of memory allocating 23040 bytes."
    assert out_of_memory.is_out_of_memory(jax.errors.JaxRuntimeError(cpu_says))
    assert not out_of_memory.is_out_of_memory(jax.errors.JaxRuntimeError("INTERNAL: a bug"))
    assert not out_of_memory.is_out_of_memory(MemoryError("out of memory"))  # the host's


def test_the_line_says_the_size_and_each_setting_that_needs_less():
    said = line("data.batch_size=256")
    assert said.startswith(
        "out of memory on cpu; XLA could not allocate 3.0 GiB. To need less, set"
    )
    assert said.endswith(
        "set a smaller data.batch_size (now 256; optim.accumulate_steps keeps the batch the "
        "optimizer steps on), or model.kwargs.remat=true (each block recomputed in the backward "
        "pass), or model.dtype=bfloat16 (activations in half the bytes)"
    )


@pytest.mark.parametrize(
    ("overrides", "compute_dtype", "says", "not_said"),
    [
        (["model.kwargs.remat=true"], "bfloat16", "data.batch_size", ("remat", "bfloat16")),
        (["model.kwargs.remat=dots_saveable"], "float32", "less than remat=dots_saveable", ()),
        (["model.name=vgg11", "data.batch_size=1"], "bfloat16", "a smaller network", ("remat",)),
        (["data.eval_batch_size=512"], "float32", "data.eval_batch_size (now 512,", ()),
        (["data.eval_batch_size=8"], "float32", "data.batch_size", ("eval_batch_size",)),
    ],
)
def test_settings_already_in_use_are_not_suggested(overrides, compute_dtype, says, not_said):
    said = line(*overrides, compute_dtype=compute_dtype)
    assert says in said and not any(word in said for word in not_said)


@pytest.mark.parametrize(
    ("devices_batch", "compute_dtype", "says"),
    [
        (128, "float32", "give --set data.eval_batch_size={64} (now {128}), or --set model.dtype="),
        (3, "bfloat16", "give --set data.eval_batch_size={1} (now {3})"),
        (1, None, "allocate 3.0 GiB: the network does not fit this device at this image size"),
    ],
)
def test_an_evaluation_is_told_its_overrides(devices_batch, compute_dtype, says):
    # nets-eval's: its batch (a multiple of the devices), and the dtype where a run's config sets
    # it (published weights' is float32, no setting); never remat, which serves only the
    # backward pass.
    devices = jax.device_count()
    said = out_of_memory.explain_evaluation(GPU_SAYS, devices * devices_batch, compute_dtype)
    says = re.sub(r"\{(\d+)\}", lambda m: str(devices * int(m.group(1))), says)
    assert says in said and said.startswith("out of memory on cpu; ") and "remat" not in said
    assert said.endswith("(activations in half the bytes)") == (compute_dtype == "float32")
