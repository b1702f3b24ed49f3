"""`nets-classify` run from a checkout; the program is nets_cli/classify.py."""

from nets_cli import classify

if __name__ == "__main__":
    classify.run()
