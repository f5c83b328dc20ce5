"""The Plan IR: what the solver returns and every emitter and the runtime read.

Holds the plan's typed form, its canonical JSON and JSON Schema, the per-rank file format and
the capability matrix (DESIGN.md, "The Plan IR"). Standard library only; the runtime imports
hetc only through this package. Its contents arrive with the cost-model issue (#3).
"""
