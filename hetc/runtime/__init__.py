"""The heterogeneous training runtime that executes a compiled plan (torch, DeepSpeed).

The only package that imports torch or deepspeed (installed with the `runtime` extra); from
the rest of hetc it imports `hetc.plan` alone. Arrives with the runtime issue (#6).
"""
