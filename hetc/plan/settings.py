"""Runtime settings that the cost model and the emitted configs must agree on.

One value each, read by both sides (DESIGN: "the emitter and the model read one value"), so
the memory the planner reserves is the memory the job allocates.
"""

REDUCE_BUCKET_ELEMENTS = 500_000_000
"""DeepSpeed's `reduce_bucket_size` / `allgather_bucket_size`, in elements (DeepSpeed's own
default): the ZeRO gradient-reduction bucket the emitter writes and `costmodel.memory` counts."""
