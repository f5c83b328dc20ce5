"""The joint search over resources and parallelisation, and its CP-SAT cross-check.

`planner.plan_spec` is the entry point (search, build, simulate, capability check);
`diagnosis.diagnose` explains an infeasible spec (the least change of each constraint);
`report` formats `hetc plan`; `search` is the branch and bound over `costmodel.planning`;
`build` turns a candidate into a Plan; `cpsat` models one shape in OR-Tools CP-SAT, imported
only when the cross-check is asked for.
"""
