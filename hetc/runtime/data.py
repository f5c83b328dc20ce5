"""Training data: which samples each pipeline trains on at each step, the same whatever the plan.

A plan splits the global batch unevenly over pipelines (18 and 14 microbatches, say), and a
re-plan changes the split. If the split decided which samples are drawn, two plans of one job
would train on different data and a resumed run under a new plan would skip or repeat samples.
So the order is fixed first, by the seed alone, and the plan only cuts it:

1. Samples are windows of `seq_len + 1` tokens starting at multiples of `seq_len` (inputs the
   first `seq_len`, targets the same shifted by one); a trailing partial window is dropped.
2. The sample stream is epoch after epoch, epoch `e` a permutation of all windows drawn from
   `(seed, e)`; step `k`'s global batch is stream positions `[k * G, (k + 1) * G)`, crossing
   epoch boundaries seamlessly (G = global batch size).
3. Pipeline `p` takes a contiguous run of that batch, in pipeline order (`pipeline_samples`); its
   microbatch `j` is the run's `j`-th slice of `micro` samples.

Synthetic data (training.json's `data` is null, or its path is `synthetic`) has no file and no
epochs: stream position `n`'s tokens are a hash of `(seed, n, position)` modulo the vocabulary,
for tests and benchmarks. docs/data.md describes the token file and its JSON sidecar.

Public API:

- `TrainingData.from_training(record, base_dir=, shares=, micro=, device=)`: the data of one
  rank, from training.json's record and the plan's per-pipeline microbatch counts.
- `TrainingData.microbatch(step, pipeline, index) -> (inputs, targets)`: int64 tensors
  `[micro, seq_len]` on the rank's device. `TrainingData.global_batch(step)`: step `step`'s
  `[G, seq_len + 1]` windows, the plan-independent reference.
- `pipeline_samples(step, shares, micro, pipeline) -> range`: the stream positions a pipeline
  trains on at a step.
- `DataPosition`: what a checkpoint saves (`TrainingData.position(step)`, `to_json`,
  `from_json`) and a resumed run checks (`TrainingData.resume`), so that it continues with
  exactly the samples an uninterrupted run would have taken.
- `TokenFile`, `SyntheticTokens`, `SampleOrder`: the parts `TrainingData` is made of.
- `write_token_file(path, tokens, format, vocab=)`, `tiny_corpus(vocab, n_tokens, seed)`: token
  files for tests and the bundled examples.
- `DataError`: a data file or a saved position that cannot be used; the message names the file.

Every random choice is splitmix64 of counters, vectorised in numpy, never numpy's Generator: its
shuffling algorithms may change between numpy releases (NEP 19), and a resumed run must draw the
same order as the run it resumes, whatever numpy the new nodes have.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray

SYNTHETIC = "synthetic"
"""The data path that asks for synthetic tokens instead of a file."""

FORMATS: dict[str, np.dtype[Any]] = {
    "uint16-tokens": np.dtype("<u2"),
    "uint32-tokens": np.dtype("<u4"),
}
"""Token file formats by their spec name: flat little-endian arrays, no header."""

_ORDER = 0x6F72646572
_SYNTHETIC = 0x73796E7468
_CORPUS = 0x636F72707573
"""Domain tags, so that the order, synthetic tokens and the tiny corpus never share a stream."""

_U64 = np.uint64


class DataError(Exception):
    """The data cannot be used as it is; the message names the file and what is wrong."""


def _splitmix64(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """splitmix64's finaliser: consecutive counters give independent-looking 64-bit values."""
    z = x + _U64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
    return z ^ (z >> _U64(31))


def _key(*parts: int) -> np.uint64:
    """One 64-bit key from several integers (seed, epoch, domain tag), each mixed in turn."""
    h = np.zeros(1, dtype=np.uint64)
    for part in parts:
        h = _splitmix64(h ^ _U64(part % 2**64))
    return np.uint64(h[0])


def _counters(key: np.uint64, counters: NDArray[np.uint64]) -> NDArray[np.uint64]:
    return _splitmix64(counters ^ key)


def _check_split(shares: Sequence[int], micro: int) -> None:
    if micro < 1:
        raise ValueError(f"microbatch size {micro} must be at least 1")
    if not shares or any(s < 1 for s in shares):
        raise ValueError(f"every pipeline needs at least one microbatch, not {list(shares)}")


def pipeline_samples(step: int, shares: Sequence[int], micro: int, pipeline: int) -> range:
    """The stream positions `pipeline` trains on at `step`: the global batch (`micro *
    sum(shares)` samples) cut into contiguous runs in pipeline order, `shares[p] * micro` each."""
    if step < 0:
        raise ValueError(f"step {step} is negative")
    _check_split(shares, micro)
    if not 0 <= pipeline < len(shares):
        raise ValueError(f"pipeline {pipeline} is not among the {len(shares)} pipelines")
    start = step * micro * sum(shares) + micro * sum(shares[:pipeline])
    return range(start, start + micro * shares[pipeline])


class SampleOrder:
    """Which window each stream position reads: epoch after epoch of permutations of `windows`.

    Epoch `e` sorts the windows by splitmix64 keys of `(seed, e, window)`; a stable sort breaks
    ties by window index, the same on every machine. The permutation costs 8 bytes per window
    (16 while it is sorted); the last two epochs are kept, since a step reads one or two.
    """

    _KEEP = 2

    def __init__(self, seed: int, windows: int) -> None:
        if windows < 1:
            raise ValueError(f"an order needs at least one window, not {windows}")
        self.seed = seed
        self.windows = windows
        self._epochs: dict[int, NDArray[np.int64]] = {}

    def permutation(self, epoch: int) -> NDArray[np.int64]:
        """Epoch `epoch`'s window indices, in the order it visits them."""
        cached = self._epochs.get(epoch)
        if cached is not None:
            return cached
        keys = _counters(_key(_ORDER, self.seed, epoch), np.arange(self.windows, dtype=np.uint64))
        order = np.argsort(keys, kind="stable").astype(np.int64)
        if len(self._epochs) >= self._KEEP:
            del self._epochs[min(self._epochs)]
        self._epochs[epoch] = order
        return order

    def windows_at(self, positions: NDArray[np.int64]) -> NDArray[np.int64]:
        """The window index at each stream position."""
        epochs, offsets = np.divmod(positions, self.windows)
        result = np.empty_like(positions)
        for epoch in np.unique(epochs):
            chosen = epochs == epoch
            result[chosen] = self.permutation(int(epoch))[offsets[chosen]]
        return result


class TokenFile:
    """A memory-mapped token file, cut into windows; checked against its sidecar when it has one.

    Token ids are checked against the model's vocabulary only in the windows that are read: a
    full scan of a large corpus would delay every start, and a batch's max is nearly free.
    """

    def __init__(self, path: Path, format: str, *, seq_len: int, vocab: int) -> None:
        if format not in FORMATS:
            raise DataError(f"{path}: unknown format {format!r}; one of {', '.join(FORMATS)}")
        if seq_len < 1:
            raise ValueError(f"seq_len {seq_len} must be at least 1")
        self.path = path
        self.format = format
        self.seq_len = seq_len
        self.vocab = vocab
        dtype = FORMATS[format]
        try:
            size = path.stat().st_size
        except OSError as error:
            raise DataError(f"{path}: cannot read the token file ({error.strerror})") from error
        if size % dtype.itemsize:
            raise DataError(
                f"{path}: {size} bytes is not a whole number of {format} tokens "
                f"({dtype.itemsize} bytes each); is the format right?"
            )
        self.tokens = size // dtype.itemsize
        if self.tokens < seq_len + 1:
            raise DataError(
                f"{path}: {self.tokens} tokens, fewer than one sample of seq_len + 1 = "
                f"{seq_len + 1}"
            )
        self._check_sidecar()
        self.windows = (self.tokens - 1) // seq_len
        self._memmap = np.memmap(path, dtype=dtype, mode="r", shape=(self.tokens,))

    @property
    def sidecar(self) -> Path:
        return sidecar_of(self.path)

    def _check_sidecar(self) -> None:
        try:
            text = self.sidecar.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        except OSError as error:
            raise DataError(f"{self.sidecar}: cannot read ({error.strerror})") from error
        try:
            record = json.loads(text)
        except json.JSONDecodeError as error:
            raise DataError(f"{self.sidecar}: not JSON ({error})") from error
        if not isinstance(record, dict):
            raise DataError(f"{self.sidecar}: must be a JSON object")
        problems = []
        if "format" in record and record["format"] != self.format:
            problems.append(
                f"format is {record['format']!r} but training.json reads {self.format!r}"
            )
        if "tokens" in record and record["tokens"] != self.tokens:
            problems.append(f"says {record['tokens']!r} tokens but {self.path} holds {self.tokens}")
        vocab = record.get("vocab")
        if vocab is not None and not (isinstance(vocab, int) and 0 < vocab <= self.vocab):
            problems.append(
                f"vocab {vocab!r} does not fit the model's vocabulary of {self.vocab} "
                "(the data was tokenised for another model?)"
            )
        if problems:
            raise DataError(f"{self.sidecar}: " + "; ".join(problems))

    def windows_of(self, indices: NDArray[np.int64]) -> NDArray[np.int64]:
        """Windows `indices`, `[len(indices), seq_len + 1]`, after the vocabulary check."""
        starts = indices * self.seq_len
        positions = starts[:, None] + np.arange(self.seq_len + 1, dtype=np.int64)
        block = np.asarray(self._memmap[positions])
        bad = block >= self.vocab
        if bad.any():
            first = int(positions[bad].min())
            value = int(self._memmap[first])
            raise DataError(
                f"{self.path}: token id {value} at token position {first} (byte "
                f"{first * self._memmap.itemsize}) is not below the model's vocabulary of "
                f"{self.vocab}"
            )
        return block.astype(np.int64)


class SyntheticTokens:
    """Tokens that need no file: stream position `n`, offset `i` reads a hash of `(seed, n, i)`
    modulo `vocab`, so every plan and every process computes the same samples."""

    def __init__(self, *, seed: int, seq_len: int, vocab: int) -> None:
        if seq_len < 1 or vocab < 1:
            raise ValueError(f"seq_len {seq_len} and vocab {vocab} must be at least 1")
        self.seq_len = seq_len
        self.vocab = vocab
        self._key = _key(_SYNTHETIC, seed)

    def samples(self, positions: NDArray[np.int64]) -> NDArray[np.int64]:
        """The windows at stream `positions`, `[len(positions), seq_len + 1]`."""
        rows = _counters(self._key, positions.astype(np.uint64))
        offsets = np.arange(self.seq_len + 1, dtype=np.uint64)
        return (_splitmix64(rows[:, None] + offsets) % _U64(self.vocab)).astype(np.int64)


@dataclass(frozen=True, kw_only=True, slots=True)
class DataPosition:
    """Where a run stands in its sample stream, as a checkpoint saves it.

    The stream is a function of the rest, so the step is the position; the rest is there to
    refuse a resume that would read a different stream (another seed, batch size, window length
    or file) and silently train on other samples than the run it continues.
    """

    step: int
    """The first step not yet trained."""
    seed: int
    global_batch_size: int
    seq_len: int
    tokens: int | None
    """The token file's length; None for synthetic data."""

    def to_json(self) -> dict[str, int | None]:
        return asdict(self)

    @classmethod
    def from_json(cls, record: object) -> DataPosition:
        fields = {"step", "seed", "global_batch_size", "seq_len", "tokens"}
        if not isinstance(record, dict) or set(record) != fields:
            raise DataError(f"a saved data position has the keys {sorted(fields)}, not {record!r}")
        for name in fields - {"tokens"}:
            if not isinstance(record[name], int) or record[name] < 0:
                raise DataError(f"a saved data position's {name} is {record[name]!r}")
        if record["tokens"] is not None and not isinstance(record["tokens"], int):
            raise DataError(f"a saved data position's tokens is {record['tokens']!r}")
        return cls(**record)


class TrainingData:
    """One rank's view of the data: the plan-independent stream, cut by the plan's shares."""

    def __init__(
        self,
        tokens: TokenFile | SyntheticTokens,
        *,
        seed: int,
        global_batch_size: int,
        shares: Sequence[int],
        micro: int,
        device: torch.device | str = "cpu",
    ) -> None:
        _check_split(shares, micro)
        if micro * sum(shares) != global_batch_size:
            raise ValueError(
                f"{micro} x {sum(shares)} microbatches ({list(shares)}) = "
                f"{micro * sum(shares)} samples, but the global batch is {global_batch_size}"
            )
        self.tokens = tokens
        self.seed = seed
        self.global_batch_size = global_batch_size
        self.shares = tuple(shares)
        self.micro = micro
        self.device = torch.device(device)
        self.order = SampleOrder(seed, tokens.windows) if isinstance(tokens, TokenFile) else None

    @classmethod
    def from_training(
        cls,
        record: Mapping[str, Any],
        *,
        base_dir: Path,
        shares: Sequence[int],
        micro: int,
        device: torch.device | str = "cpu",
    ) -> TrainingData:
        """From training.json's record; a relative data path is taken from `base_dir` (the
        directory the spec was in, since training.json keeps the path as the spec wrote it)."""
        seq_len, seed, vocab = record["seq_len"], record["seed"], record["model"]["vocab"]
        data = record["data"]
        tokens: TokenFile | SyntheticTokens
        if data is None or data["path"] == SYNTHETIC:
            tokens = SyntheticTokens(seed=seed, seq_len=seq_len, vocab=vocab)
        else:
            tokens = TokenFile(
                base_dir / data["path"], data["format"], seq_len=seq_len, vocab=vocab
            )
        return cls(
            tokens,
            seed=seed,
            global_batch_size=record["global_batch_size"],
            shares=shares,
            micro=micro,
            device=device,
        )

    @property
    def seq_len(self) -> int:
        return self.tokens.seq_len

    def _samples(self, positions: NDArray[np.int64]) -> NDArray[np.int64]:
        if isinstance(self.tokens, SyntheticTokens):
            return self.tokens.samples(positions)
        assert self.order is not None
        return self.tokens.windows_of(self.order.windows_at(positions))

    def global_batch(self, step: int) -> NDArray[np.int64]:
        """Step `step`'s `[G, seq_len + 1]` windows, before any pipeline takes its share."""
        if step < 0:
            raise ValueError(f"step {step} is negative")
        start = step * self.global_batch_size
        return self._samples(np.arange(start, start + self.global_batch_size, dtype=np.int64))

    def microbatch(self, step: int, pipeline: int, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Microbatch `index` of `pipeline` at `step`: (inputs, targets), int64 `[micro,
        seq_len]` on the device, targets the inputs shifted by one token."""
        run = pipeline_samples(step, self.shares, self.micro, pipeline)
        if not 0 <= index < self.shares[pipeline]:
            raise ValueError(
                f"pipeline {pipeline} has microbatches 0..{self.shares[pipeline] - 1}, not {index}"
            )
        first = run.start + index * self.micro
        windows = torch.from_numpy(
            self._samples(np.arange(first, first + self.micro, dtype=np.int64))
        ).to(self.device)
        return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()

    def position(self, step: int) -> DataPosition:
        """What to save with a checkpoint taken before step `step` is trained."""
        return DataPosition(
            step=step,
            seed=self.seed,
            global_batch_size=self.global_batch_size,
            seq_len=self.seq_len,
            tokens=self.tokens.tokens if isinstance(self.tokens, TokenFile) else None,
        )

    def resume(self, position: DataPosition) -> int:
        """The step to continue from, once `position` is known to describe this same stream."""
        mine = self.position(position.step)
        differ = [
            f"{name} {getattr(position, name)} -> {getattr(mine, name)}"
            for name in ("seed", "global_batch_size", "seq_len", "tokens")
            if getattr(position, name) != getattr(mine, name)
        ]
        if differ:
            raise DataError(
                "the checkpoint's data position reads another sample stream ("
                + ", ".join(differ)
                + "); resuming would train on other samples than the interrupted run"
            )
        return position.step


def sidecar_of(path: Path) -> Path:
    """`<file>.json` beside the token file."""
    return path.with_name(path.name + ".json")


def write_token_file(
    path: Path, tokens: ArrayLike, format: str, *, vocab: int | None = None
) -> None:
    """Write `tokens` as a token file with its sidecar (which records `vocab` when given)."""
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; one of {', '.join(FORMATS)}")
    dtype = FORMATS[format]
    values = np.asarray(tokens)
    if values.ndim != 1 or not np.issubdtype(values.dtype, np.integer):
        raise ValueError("tokens must be a flat array of integers")
    bound = np.iinfo(dtype).max + 1 if vocab is None else min(vocab, np.iinfo(dtype).max + 1)
    if values.size and (int(values.min()) < 0 or int(values.max()) >= bound):
        raise ValueError(f"token ids must lie in [0, {bound}) for {format}")
    values.astype(dtype).tofile(path)
    sidecar: dict[str, Any] = {"format": format, "tokens": int(values.size)}
    if vocab is not None:
        sidecar["vocab"] = vocab
    sidecar_of(path).write_text(json.dumps(sidecar) + "\n", encoding="utf-8")


def tiny_corpus(vocab: int, n_tokens: int, seed: int) -> NDArray[np.int64]:
    """A learnable corpus: a cycle of up to 32 distinct tokens, 1 in 16 replaced by noise.

    Each cycle token determines the next, so even a one-layer model's loss falls well below
    log(vocab) within a few steps, which is what a training test needs to see.
    """
    if vocab < 2 or n_tokens < 0:
        raise ValueError(f"need vocab >= 2 and n_tokens >= 0, not {vocab} and {n_tokens}")
    key = _key(_CORPUS, seed)
    cycle = np.argsort(_counters(key, np.arange(vocab, dtype=np.uint64)), kind="stable")
    cycle = cycle[: min(32, vocab)]
    noise = _counters(_key(_CORPUS, seed, 1), np.arange(n_tokens, dtype=np.uint64))
    corpus = cycle[np.arange(n_tokens) % len(cycle)].astype(np.int64)
    noisy = noise % _U64(16) == 0
    corpus[noisy] = ((noise[noisy] >> _U64(8)) % _U64(vocab)).astype(np.int64)
    return corpus
