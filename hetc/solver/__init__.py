"""The joint search over resources and parallelisation, and its CP-SAT cross-check.

OR-Tools is imported lazily, only when the cross-check is asked for. Arrives with the planner
issue (#4).
"""
