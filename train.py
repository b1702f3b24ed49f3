"""`nets-train` run from a checkout; the program is nets_cli/train.py."""

from nets_cli import train

if __name__ == "__main__":
    train.run()
