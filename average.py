"""`nets-average` run from a checkout; the program is nets_cli/average.py."""

from nets_cli import average

if __name__ == "__main__":
    average.run()
