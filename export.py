"""`nets-export` run from a checkout; the program is nets_cli/export.py."""

from nets_cli import export

if __name__ == "__main__":
    export.run()
