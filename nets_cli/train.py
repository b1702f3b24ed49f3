"""Trains a network of the registry from a YAML experiment config (`nets-train` when installed,
`python train.py` in a checkout).

    nets-train                                             # digits, the README's main job
    nets-train --config=configs/imagenet_resnet50.yaml --workdir=runs/r50
    nets-train --set optim.lr=0.05 --set train.steps=200

`--config` takes a file, or the name of a config the package ships (`cifar10_resnet20.yaml`).

Re-running a command with the same --workdir resumes it; without --workdir each run gets a new
folder. SIGTERM or a Ctrl-C while it trains saves a checkpoint and stops; a second Ctrl-C, or one
before the first step is done (data loading, compiling), stops at once. Either way the run ends
in one line that says which checkpoint is kept and the command that resumes from it (the one
given, plus the --workdir it used), or that none was saved yet (the same command starts the run
again), with exit status 128 + the signal. A second run in a
workdir that a run holds says which process holds it.
Errors in the config, the data or the workdir (a file, a full or read-only disk) are one line on
stderr and a non-zero exit status.
"""

import multiprocessing
import shlex
import signal
import sys
import time
from pathlib import Path

from absl import flags

from nets_cli import common
from nets_training import config, host_memory, preemption, xla_cpu_flags
from nets_training.errors import PeerLost, UserError
from nets_training.preemption import Interrupted

if multiprocessing.current_process().name != "MainProcess":
    # A data worker starting (`data.workers`): multiprocessing's spawn runs the program's script
    # before the worker's code, and a terminal's Ctrl-C, which reaches the whole process group,
    # is the training process's to answer (it stops its workers; `data.start_worker` says why
    # once the worker runs). Set here, it covers the seconds the worker takes to import grain
    # and JAX.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

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
_NUM_PROCESSES = flags.DEFINE_integer(
    "num_processes", None, "Multi-process: how many processes.", lower_bound=1
)
_PROCESS_ID = flags.DEFINE_integer(
    "process_id", None, "Multi-process: this process's index.", lower_bound=0
)
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
    try:
        overrides = ([f"model.name={_MODEL.value}"] if _MODEL.value else []) + _SET.value
        # Before importing JAX, so that config errors come back at once.
        cfg = config.load(_CONFIG.value or config.DEFAULT, overrides)
        common.check_overrides(_SET.value, cfg.data.name)
        start_jax()
        from nets_training import loop

        workdir = _WORKDIR.value or f"runs/{cfg.model.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        # The run unwinds on a Ctrl-C: its workdir, data workers and checkpoints are closed.
        with preemption.exit_promptly(lambda: stopped(workdir), unwind=True):
            loop.train(cfg, workdir)
    except Interrupted as e:
        common.fail(f"{e}; to resume, run: {resume_command(workdir)}", e.exit_code)
    except PeerLost as e:
        common.fail(f"{e}: {resume_command(workdir)}", e.exit_code)
    except UserError as e:
        common.fail(str(e), getattr(e, "exit_code", 2))
    except OSError as e:  # writing the workdir's files: a full disk, a read-only one
        common.fail(f"{e.filename or 'writing'}: {e.strerror or e}", 1)
    except Exception as e:
        from nets_training import networks, out_of_memory

        if not out_of_memory.is_out_of_memory(e):
            raise
        line = out_of_memory.explain(e, cfg, networks.compute_dtype(cfg.model.dtype))
        common.fail(f"{line}. {kept_checkpoint(workdir)}", 1)


def start_jax() -> None:
    """Imports JAX as the flags say: memory reuse and XLA flags before it starts, then the
    compilation cache, the quiet of failed writes, and the other processes of a multi-process
    run."""
    if _MALLOC_REUSE.value:
        host_memory.reuse_freed_memory()  # before JAX starts its threads
    if _EIGEN_CONVOLUTIONS.value:
        xla_cpu_flags.prefer_eigen_convolutions()  # before JAX starts its backend
    import jax

    from nets_training import checkpoint, sharding

    if _CACHE.value:
        jax.config.update("jax_compilation_cache_dir", str(Path(_CACHE.value).expanduser()))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    if not flags.FLAGS["verbosity"].present:
        checkpoint.quiet_write_failures()  # the loop says a failed write in one line
    sharding.initialize_distributed(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)


def stopped(workdir: str) -> str:
    """The line for a run that a Ctrl-C stopped at once: its newest checkpoint, and the command
    that resumes from it."""
    from nets_training import checkpoint

    last = checkpoint.newest_complete_step(Path(workdir) / "checkpoints")
    if last is None:
        return f"{common.program()}: SIGINT: stopped before any checkpoint was saved"
    return (
        f"{common.program()}: SIGINT: stopped at once; the last checkpoint is step {last} in "
        f"{Path(workdir) / 'checkpoints'}; to resume, run: {resume_command(workdir)}"
    )


def kept_checkpoint(workdir: str) -> str:
    """What a run that failed left to resume from."""
    from nets_training import checkpoint

    folder = Path(workdir) / "checkpoints"
    last = checkpoint.newest_complete_step(folder)
    if last is None:
        return "No checkpoint was saved"
    return f"The last complete checkpoint is step {last} in {folder}"


def resume_command(workdir: str) -> str:
    """This process's command line as the user typed it, with the `workdir` it used when it
    named none."""
    argv = common.typed_command(sys.orig_argv)
    return shlex.join(argv + ([] if _WORKDIR.value else [f"--workdir={workdir}"]))


def run() -> None:
    """The `nets-train` console script."""
    common.run(main, __name__)


if __name__ == "__main__":
    run()
