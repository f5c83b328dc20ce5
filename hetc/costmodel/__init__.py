"""Memory per rank, compute and communication time, iteration time, and cost of a plan.

Pure Python with numpy; never imports torch. `simulate` evaluates a whole plan from the parts:
`compute` (per-layer seconds), `network` (links and collectives), `memory` (per-rank peak),
`schedule` (1F1B closed form and event simulator), `cost` (rental and egress), `traffic`
(every communication call of an iteration: the one source of bytes on the wire); `tables`
holds the prefix sums the planner's hot path reads. See docs/costmodel.md.
"""
