"""The command lines the programs say back (a resume hint): as the user typed them."""

import os
import sys

from nets_cli import common


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
