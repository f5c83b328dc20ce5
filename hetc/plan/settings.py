"""Runtime settings that the cost model and the emitted configs must agree on.

One value each, read by both sides (DESIGN: "the emitter and the model read one value"), so
the memory the planner reserves is the memory the job allocates.
"""

REDUCE_BUCKET_ELEMENTS = 500_000_000
"""DeepSpeed's `reduce_bucket_size` / `allgather_bucket_size`, in elements (DeepSpeed's own
default): the ZeRO gradient-reduction bucket the emitter writes and `costmodel.memory` counts."""


def reduce_bucket_elements(model_parameters: int) -> int:
    """The bucket size to write for a model: DeepSpeed's default, but never more than the
    model has parameters. DeepSpeed allocates the whole bucket (`torch.empty(reduce_bucket_size)`)
    whatever the model's size, so a 5e8-element default would cost a small model gigabytes
    it can never fill (2 GB for the bundled CPU example)."""
    return max(1, min(REDUCE_BUCKET_ELEMENTS, model_parameters))


VOCAB_PAD = 128
"""The runtime pads the vocabulary to a multiple of this many rows, so that every TP degree
of a plan (any power of two up to 128) splits the token table and the head equally, whatever
the plan (Megatron's `make_vocab_size_divisible_by` default): the parameter contract
`hetc.runtime.model` builds and `hetc.costmodel.traffic` counts."""


def padded_vocab(vocab: int) -> int:
    """Rows of the runtime's token table (and untied head) for a vocabulary of `vocab`."""
    return -(-vocab // VOCAB_PAD) * VOCAB_PAD
