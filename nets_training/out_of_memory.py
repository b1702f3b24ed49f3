"""A device's "out of memory" as one line that says what to change, where XLA gives a traceback.

A GPU user's most common failure: a batch, a network or a resolution that does not fit. XLA says
`RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes` (a GPU's, a TPU's) or
`INTERNAL: Error dispatching computation: Out of memory allocating N bytes` (XLA:CPU's), from
wherever the allocation failed: the state's construction, the compile, a step, an evaluation.
Training (`explain`) and evaluating from another process (`explain_evaluation`) have different
settings to change.
"""

import re

import jax

import nets_factory
from nets_training.config import Config


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` is XLA's refusal to allocate device memory."""
    if not isinstance(error, jax.errors.JaxRuntimeError):
        return False
    message = str(error)
    return "RESOURCE_EXHAUSTED" in message or "out of memory" in message.lower()


def gib(size: float) -> str:
    return f"{size / 2**30:,.1f} GiB"


def situation(error: BaseException) -> str:
    """What failed where: the device, how much XLA asked for and how much the device holds
    (where XLA says)."""
    device = jax.local_devices()[0]
    kind = device.device_kind
    said = [
        f"out of memory on {kind}" + ("" if kind == device.platform else f" ({device.platform})")
    ]
    if asked := re.search(r"allocat\w*\s+(\d+)\s+bytes", str(error)):
        said.append(f"XLA could not allocate {gib(int(asked.group(1)))}")
    if limit := (device.memory_stats() or {}).get("bytes_limit"):
        said.append(f"the device holds {gib(limit)}")
    return "; ".join(said)


def explain(error: BaseException, config: Config, compute_dtype: str) -> str:
    """The line for `error` in training: `situation`, then the settings of `config` that need
    less memory: a smaller batch (the evaluations' too, where larger), gradient checkpointing,
    bfloat16 activations, whichever it does not use yet."""
    model, batch = config.model, config.data.batch_size
    hints = []
    if batch > 1:
        hints.append(
            f"a smaller data.batch_size (now {batch}; optim.accumulate_steps keeps the batch the "
            "optimizer steps on)"
        )
    if (evaluation := config.data.eval_batch_size) and evaluation > batch:
        hints.append(f"a smaller data.eval_batch_size (now {evaluation}, the evaluations' batch)")
    remat = model.kwargs.get("remat", False)
    if "remat" in nets_factory.constructor_fields(model.name) and remat is not True:
        kept = f", less than remat={remat}" if remat else ""
        hints.append(f"model.kwargs.remat=true (each block recomputed in the backward pass{kept})")
    if compute_dtype == "float32":
        hints.append("model.dtype=bfloat16 (activations in half the bytes)")
    if not hints:
        hints.append("a smaller network or data.image_size")
    return f"{situation(error)}. To need less, set {', or '.join(hints)}"


def explain_evaluation(error: BaseException, batch: int, compute_dtype: str | None) -> str:
    """The line for `error` in an evaluation of `batch` images a step (`nets-eval`): `situation`,
    then the `--set` overrides that need less memory. `compute_dtype` is None where it is not a
    setting (published weights compute in float32 as their source does)."""
    hints = []
    if batch > jax.device_count():
        smaller = max(jax.device_count(), batch // 2 // jax.device_count() * jax.device_count())
        hints.append(f"--set data.eval_batch_size={smaller} (now {batch})")
    if compute_dtype == "float32":
        hints.append("--set model.dtype=bfloat16 (activations in half the bytes)")
    if not hints:
        return f"{situation(error)}: the network does not fit this device at this image size"
    return f"{situation(error)}. To need less, give {', or '.join(hints)}"
