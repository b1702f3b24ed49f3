"""All the device placement: one mesh over every device, batches split on 'data', rest replicated.

Data parallelism with `jax.jit` and `NamedSharding` (no `pmap`): each process feeds its own
slice of the global batch, `make_array_from_process_local_data` assembles the global array, and
XLA inserts the gradient all-reduce (and BatchNorm's cross-device mean) itself. So the numbers do
not depend on the device count, only the float summation order does.
"""

import os
import re

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nets_training.errors import UserError

DATA_AXIS = "data"
# What a collective or the coordination service says when a peer process is gone (CPU: Gloo;
# GPU: NCCL; any backend: the service's heartbeats).
_PEER_GONE = ("Gloo", "NCCL", "heartbeat", "Connection reset", "coordination service")


def initialize_distributed(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> None:
    """Joins a multi-process run when one is configured, by flags or by the environment.

    Flags name the coordinator explicitly; otherwise `JAX_COORDINATOR_ADDRESS` (or a cluster that
    JAX detects itself, e.g. SLURM or Cloud TPU, when `JAX_DISTRIBUTED=1`) does. One process alone
    needs none of it. Must run before anything touches a device.
    """
    explicit = coordinator_address or num_processes or process_id is not None
    if explicit or os.environ.get("JAX_COORDINATOR_ADDRESS") or os.environ.get("JAX_DISTRIBUTED"):
        jax.distributed.initialize(coordinator_address, num_processes, process_id)


def peer_failure(error: BaseException) -> str | None:
    """Why a multi-process run's computation failed, when it failed because another process
    ended (its first line, without source locations); None for any other error."""
    if jax.process_count() == 1 or not isinstance(error, jax.errors.JaxRuntimeError):
        return None
    line = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if not any(marker in line for marker in _PEER_GONE):
        return None
    line = re.sub(r"\[[^\]]*\.(cc|h):\d+\]\s*", "", line)  # [external/gloo/.../pair.cc:538]
    return re.sub(r"^\w+: Error dispatching computation: ", "", line)


def make_mesh() -> Mesh:
    """A 1-D mesh over every device of every process."""
    return Mesh(np.asarray(jax.devices()), (DATA_AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def data_sharded(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec(DATA_AXIS))


def local_batch_size(global_batch: int, key: str) -> int:
    """This process's share of `global_batch`; refuses one that the devices cannot split evenly."""
    devices = jax.device_count()
    if global_batch % devices:
        raise UserError(
            f"{key}={global_batch} must be divisible by the number of devices ({devices}); "
            f"try {max(devices, global_batch // devices * devices)}"
        )
    return global_batch // jax.process_count()


def shard_batch(batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """Global arrays from this process's slice of each batch leaf."""
    sharding = data_sharded(mesh)
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}
