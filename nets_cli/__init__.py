"""The command-line programs, installed as console scripts: `nets-train`, `nets-eval`,
`nets-export`, `nets-classify` (`python train.py` etc. run them from a checkout)."""
