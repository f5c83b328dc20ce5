"""The heterogeneous training runtime that executes a compiled plan (torch, DeepSpeed).

The only package that imports torch or deepspeed (installed with the `runtime` extra); from
the rest of hetc it imports `hetc.plan` alone. torchrun starts `python -m hetc.runtime OUT_DIR`
on every process; `startup` finds the process in the plan, checks that all processes agree, and
creates and checks the plan's process groups. Training arrives with the runtime issue (#6).
"""
