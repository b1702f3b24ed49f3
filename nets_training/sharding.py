"""All the device placement: one mesh over every device, batches split on 'data', rest replicated.

Data parallelism with `jax.jit` and `NamedSharding` (no `pmap`): each process feeds its own
slice of the global batch, `make_array_from_process_local_data` assembles the global array, and
XLA inserts the gradient all-reduce (and BatchNorm's cross-device mean) itself. So the numbers do
not depend on the device count, only the float summation order does.
"""

import os

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nets_training.errors import UserError

DATA_AXIS = "data"


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
