"""The training program below `train.py`: one module per concern.

config (YAML -> frozen dataclasses), sources + data (datasets and grain pipelines), networks (the
networks a config builds), steps (the train state and the jitted steps), optim (optimizers,
schedules), teacher + distill (knowledge distillation: the teacher, its loss), sharding (the
device mesh), checkpoint (orbax, fine-tuning), metrics (files and console), preemption
(signals), workdir (its lock and tidying), loop (the program: `train(config, workdir)`).
"""
