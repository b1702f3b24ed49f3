"""What the programs share (nets_cli/common.py, nets_cli/output.py): a bad flag or argument is
one line of ours; output piped to a reader that stopped early (`| head`) ends quietly; the
command lines they say back (a resume hint) are as the user typed them."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import nets_summary
from nets_cli import common

ROOT = Path(__file__).resolve().parents[1]


def run(*args):
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=60, cwd=ROOT
    )


@pytest.mark.slow  # the programs run as subprocesses (~1 s each: refused before JAX is imported)
@pytest.mark.parametrize(
    "args, message",
    [
        (  # absl's validators, in one line rather than absl's two ("FATAL Flags parsing error")
            ["eval.py", "--workdir=w", "--watch", "--poll_seconds=-1"],
            "flag --poll_seconds=-1.0: must be more than 0 (seconds between two looks)",
        ),
        (
            ["eval.py", "--give_up_seconds=-5"],
            "flag --give_up_seconds=-5: -5.0 is not a non-negative number",
        ),
        (["export.py", "--step=-2"], "flag --step=-2: -2 is not a non-negative integer"),
        (["train.py", "--num_processes=0"], "flag --num_processes=0: 0 is not a positive integer"),
        (  # a config override without its --set: said how to write it, not the whole --help
            ["train.py", "optim.lr=0.1", "extra"],
            "unexpected arguments: optim.lr=0.1 extra (a config override is a flag: write "
            "--set optim.lr=0.1)",
        ),
        (["export.py", "a=b"], "unexpected arguments: a=b"),  # export.py takes no --set
    ],
)
def test_a_bad_flag_or_argument_is_one_line(args, message):
    result = run(*args)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"{args[0]}: {message}\n")


def piped_to_a_reader_that_stopped(monkeypatch):
    """Standard output that is a pipe whose reader has gone: writing to it fails (EPIPE)."""
    read, write = os.pipe()
    os.close(read)
    stdout = os.fdopen(write, "w")
    monkeypatch.setattr(sys, "stdout", stdout)
    return stdout


@pytest.mark.parametrize("argv", [[], ["resnet20"]])  # the table (47 KB), a description (1 KB)
def test_the_listing_ends_quietly_when_its_reader_stops(monkeypatch, argv):
    # `python -m nets_factory | head -2`: exit status 0, no BrokenPipeError (while printing the
    # table; at the last flush of the description, which its buffer held).
    stdout = piped_to_a_reader_that_stopped(monkeypatch)
    with pytest.raises(SystemExit) as ended:
        nets_summary.main(argv)
    assert ended.value.code == 0
    print("after the end", file=stdout, flush=True)  # the null device now: the exit's flush works
    stdout.close()


@pytest.mark.slow  # train.py run as a subprocess
def test_a_program_piped_to_a_reader_that_stopped_ends_quietly():
    # `python train.py --help | head -1`: what absl's help prints goes through nets_cli.common.run.
    with subprocess.Popen(
        [sys.executable, "train.py", "--help"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as program:
        program.stdout.close()
        stderr = program.stderr.read()
    assert (program.returncode, stderr) == (0, "")


def test_a_console_script_is_said_by_its_name_and_a_script_as_it_was_run(monkeypatch, tmp_path):
    script = tmp_path / "nets-train"
    script.write_text("#!/usr/bin/env python3\n")
    script.chmod(0o755)
    # Its shebang runs `python3 /venv/bin/nets-train ...`: what `sys.orig_argv` holds.
    monkeypatch.setattr(sys, "argv", [str(script), "--set", "train.steps=9"])
    ran = ["/venv/bin/python3", str(script), "--set", "train.steps=9"]
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert common.typed_command(ran) == ["nets-train", "--set", "train.steps=9"]
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))  # not on PATH: by its path
    assert common.typed_command(ran) == [str(script), "--set", "train.steps=9"]
    monkeypatch.setattr(sys, "argv", ["train.py", "--set", "train.steps=9"])
    ran = ["python", "train.py", "--set", "train.steps=9"]
    assert common.typed_command(ran) == ran
