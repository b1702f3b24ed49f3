"""Trains a network of the registry from a YAML experiment config (`nets-train` when installed,
`python train.py` in a checkout).

    nets-train                                             # digits, the README's main job
    nets-train --config=configs/imagenet_resnet50.yaml --workdir=runs/r50
    nets-train --set optim.lr=0.05 --set train.steps=200

`--config` takes a file, or the name of a config the package ships (`cifar10_resnet20.yaml`).

Re-running a command with the same --workdir resumes it; without --workdir each run gets a new
folder, so SIGTERM and Ctrl-C end with the command that resumes (the one given, plus the
--workdir it used). A second run in a workdir that a run holds says which process holds it.
Errors in the config, the data or the workdir (a file, a full or read-only disk) are one line on
stderr and a non-zero exit status.
"""

import shlex
import sys
import time
from pathlib import Path

from absl import flags, logging

from nets_cli import common
from nets_training import config, host_memory, xla_cpu_flags
from nets_training.errors import UserError
from nets_training.preemption import Interrupted

_CONFIG = flags.DEFINE_string(
    "config", None, "YAML experiment config, or a shipped one's name; default: the digits job."
)
_MODEL = flags.DEFINE_string("model", None, "Network name; overrides model.name.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder; default: a new one under runs/.")
_SET = flags.DEFINE_multi_string("set", [], "key.path=value overrides, values parsed as YAML.")
_CACHE = flags.DEFINE_string(
    "compilation_cache", "~/.cache/jax_nets_factory", "XLA compilation cache folder; '' disables."
)
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "Multi-process: host:port of process 0."
)
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Multi-process: how many processes.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "Multi-process: this process's index.")
_MALLOC_REUSE = flags.DEFINE_bool(
    "malloc_reuse",
    True,
    "glibc keeps freed memory for XLA:CPU's next step (nets_training/host_memory.py: 1.25x on "
    "ResNet-20's CPU step); --nomalloc_reuse keeps glibc's defaults.",
)
_EIGEN_CONVOLUTIONS = flags.DEFINE_bool(
    "eigen_convolutions",
    True,
    "XLA:CPU's convolutions on Eigen rather than YNNPACK (nets_training/xla_cpu_flags.py: 1.1x on "
    "ResNet-20's CPU step); --noeigen_convolutions keeps XLA's default.",
)


def main(argv: list[str]) -> None:
    common.start(argv)
    if not flags.FLAGS["verbosity"].present:
        # A failed write comes back to the loop, which says it in one line; orbax's threads
        # would log it first, with their tracebacks.
        logging.get_absl_logger().addFilter(lambda record: "/orbax/" not in record.pathname)
    try:
        overrides = ([f"model.name={_MODEL.value}"] if _MODEL.value else []) + _SET.value
        # Before importing JAX, so that config errors come back at once.
        cfg = config.load(_CONFIG.value or config.DEFAULT, overrides)
        if _MALLOC_REUSE.value:
            host_memory.reuse_freed_memory()  # before JAX starts its threads
        if _EIGEN_CONVOLUTIONS.value:
            xla_cpu_flags.prefer_eigen_convolutions()  # before JAX starts its backend
        import jax

        from nets_training import loop, sharding

        if _CACHE.value:
            jax.config.update("jax_compilation_cache_dir", str(Path(_CACHE.value).expanduser()))
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        sharding.initialize_distributed(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
        workdir = _WORKDIR.value or f"runs/{cfg.model.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        loop.train(cfg, workdir)
    except Interrupted as e:
        print(
            f"{common.program()}: {e}; to resume, run: {resume_command(workdir)}", file=sys.stderr
        )
        sys.exit(e.exit_code)
    except UserError as e:
        print(f"{common.program()}: {e}", file=sys.stderr)
        sys.exit(getattr(e, "exit_code", 2))
    except OSError as e:  # writing the workdir's files: a full disk, a read-only one
        print(f"{common.program()}: {e.filename or 'writing'}: {e.strerror or e}", file=sys.stderr)
        sys.exit(1)


def resume_command(workdir: str) -> str:
    """This process's command line, with the `workdir` it used when it named none."""
    return shlex.join(sys.orig_argv + ([] if _WORKDIR.value else [f"--workdir={workdir}"]))


def run() -> None:
    """The `nets-train` console script."""
    common.run(main, __name__)


if __name__ == "__main__":
    run()
