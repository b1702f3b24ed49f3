"""`nets-eval` run from a checkout; the program is nets_cli/eval.py."""

from nets_cli import eval

if __name__ == "__main__":
    eval.run()
