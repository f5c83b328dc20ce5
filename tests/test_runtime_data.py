"""The runtime's data: plan-independent batches, exact epochs, checked files, exact resumes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hetc.runtime.data import (
    SYNTHETIC,
    DataError,
    DataPosition,
    SampleOrder,
    SyntheticTokens,
    TokenFile,
    TrainingData,
    pipeline_samples,
    sidecar_of,
    tiny_corpus,
    write_token_file,
)

SEQ = 8
VOCAB = 1000
GLOBAL = 8
SPLITS = [([4, 4], 1), ([5, 3], 1), ([8], 1), ([2, 2], 2), ([1, 2, 1], 2)]
"""Plans of one global batch of 8: (microbatches per pipeline, microbatch size)."""


def _record(data: dict[str, str] | None, *, seed: int = 7) -> dict[str, Any]:
    """The part of training.json the data reads."""
    return {
        "seq_len": SEQ,
        "global_batch_size": GLOBAL,
        "seed": seed,
        "model": {"vocab": VOCAB},
        "data": data,
    }


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A token file of 12 windows and 3 spare tokens (the partial window to drop)."""
    path = tmp_path / "train.bin"
    write_token_file(path, tiny_corpus(VOCAB, 12 * SEQ + 4, seed=3), "uint16-tokens", vocab=VOCAB)
    return path


def _data(path: Path | None, shares: list[int], micro: int, **record: Any) -> TrainingData:
    data = None if path is None else {"path": path.name, "format": "uint16-tokens"}
    base = Path(".") if path is None else path.parent
    return TrainingData.from_training(
        _record(data, **record), base_dir=base, shares=shares, micro=micro
    )


def _concatenated(data: TrainingData, step: int) -> np.ndarray:
    """Every pipeline's microbatches in pipeline order, as [G, seq_len + 1] windows."""
    rows = []
    for pipeline, share in enumerate(data.shares):
        for index in range(share):
            inputs, targets = data.microbatch(step, pipeline, index)
            assert inputs.shape == targets.shape == (data.micro, SEQ)
            assert inputs.dtype == targets.dtype == torch.int64
            rows.append(torch.cat([inputs, targets[:, -1:]], dim=1).numpy())
    return np.concatenate(rows)


@pytest.mark.parametrize("synthetic", [False, True])
def test_every_split_trains_on_the_same_global_batch(corpus: Path, synthetic: bool) -> None:
    """[4,4], [5,3], [8], [2,2] x 2, [1,2,1] x 2: pipelines' microbatches, concatenated in
    pipeline order, are the global batch, and the global batch is the same for every split."""
    path = None if synthetic else corpus
    reference = _data(path, [8], 1)
    for step in range(4):
        expected = reference.global_batch(step)
        assert expected.shape == (GLOBAL, SEQ + 1)
        for shares, micro in SPLITS:
            data = _data(path, shares, micro)
            assert np.array_equal(data.global_batch(step), expected)
            assert np.array_equal(_concatenated(data, step), expected)


def test_pipeline_samples_are_contiguous_runs_in_pipeline_order() -> None:
    assert [pipeline_samples(3, [5, 3], 1, p) for p in (0, 1)] == [range(24, 29), range(29, 32)]
    assert [pipeline_samples(1, [1, 2, 1], 2, p) for p in (0, 1, 2)] == [
        range(8, 10),
        range(10, 14),
        range(14, 16),
    ]
    with pytest.raises(ValueError, match="pipeline 2"):
        pipeline_samples(0, [4, 4], 1, 2)
    with pytest.raises(ValueError, match="at least one microbatch"):
        pipeline_samples(0, [8, 0], 1, 0)


def test_shares_must_make_up_the_global_batch(corpus: Path) -> None:
    with pytest.raises(ValueError, match="global batch is 8"):
        _data(corpus, [4, 3], 1)
    with pytest.raises(ValueError, match="not 4"):
        _data(corpus, [4, 4], 1).microbatch(0, 1, 4)


def test_targets_are_inputs_shifted_by_one(corpus: Path) -> None:
    """Both come from one window of the file starting at a multiple of seq_len."""
    tokens = np.fromfile(corpus, dtype="<u2").astype(np.int64)
    inputs, targets = _data(corpus, [2, 2], 2).microbatch(5, 1, 1)
    for row_in, row_target in zip(inputs.numpy(), targets.numpy(), strict=True):
        starts = [s for s in range(0, 12 * SEQ, SEQ) if np.array_equal(tokens[s : s + SEQ], row_in)]
        assert starts, "every input is a window starting at a multiple of seq_len"
        assert any(np.array_equal(tokens[s + 1 : s + SEQ + 1], row_target) for s in starts)


def test_every_window_once_per_epoch_and_epochs_cross_seamlessly(corpus: Path) -> None:
    """12 windows, batches of 8: step 1 holds the end of epoch 0 and the start of epoch 1."""
    data = _data(corpus, [4, 4], 1)
    file = data.tokens
    assert isinstance(file, TokenFile) and file.windows == 12
    window_of = {tuple(file.windows_of(np.array([w]))[0]): w for w in range(12)}
    assert len(window_of) == 12, "the corpus's windows are distinct, so rows identify them"
    stream = [window_of[tuple(row)] for step in range(6) for row in data.global_batch(step)]
    epochs = [stream[i : i + 12] for i in range(0, 48, 12)]
    assert all(sorted(epoch) == list(range(12)) for epoch in epochs)
    assert len({tuple(epoch) for epoch in epochs}) == 4, "each epoch has its own order"


def test_order_is_a_permutation_per_epoch_and_a_function_of_seed_and_epoch() -> None:
    order = SampleOrder(seed=11, windows=1000)
    for epoch in range(3):
        assert np.array_equal(np.sort(order.permutation(epoch)), np.arange(1000))
    fresh = SampleOrder(seed=11, windows=1000)
    positions = np.arange(2500, dtype=np.int64)[::-1].copy()
    assert np.array_equal(order.windows_at(positions), fresh.windows_at(positions))
    assert not np.array_equal(SampleOrder(12, 1000).permutation(0), order.permutation(0))


@pytest.mark.parametrize(
    ("format", "dtype", "top"),
    [("uint16-tokens", "<u2", 65535), ("uint32-tokens", "<u4", 2**32 - 1)],
)
def test_token_files_round_trip(tmp_path: Path, format: str, dtype: str, top: int) -> None:
    """Little-endian, no header, sidecar beside it; the largest id of the format survives."""
    tokens = np.array([0, 1, top, 5, 6, 7, 8, 9, 10], dtype=np.int64)
    path = tmp_path / "t.bin"
    write_token_file(path, tokens, format)
    assert path.read_bytes() == tokens.astype(dtype).tobytes()
    assert json.loads(sidecar_of(path).read_text()) == {"format": format, "tokens": 9}
    file = TokenFile(path, format, seq_len=4, vocab=top + 1)
    assert file.windows == 2
    assert np.array_equal(file.windows_of(np.array([1, 0])), [tokens[4:9], tokens[0:5]])


def test_token_file_without_sidecar_is_accepted(corpus: Path) -> None:
    sidecar_of(corpus).unlink()
    assert TokenFile(corpus, "uint16-tokens", seq_len=SEQ, vocab=VOCAB).windows == 12


@pytest.mark.parametrize(
    ("sidecar", "message"),
    [
        ({"format": "uint32-tokens"}, "format is 'uint32-tokens'"),
        ({"tokens": 99}, "says 99 tokens but .*train.bin holds 100"),
        ({"vocab": VOCAB + 1}, f"vocab {VOCAB + 1} does not fit the model's vocabulary of {VOCAB}"),
    ],
)
def test_sidecar_mismatch_names_the_sidecar(
    corpus: Path, sidecar: dict[str, Any], message: str
) -> None:
    sidecar_of(corpus).write_text(json.dumps(sidecar))
    with pytest.raises(DataError, match=f"train.bin.json: {message}"):
        _data(corpus, [8], 1)


def test_malformed_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "odd.bin"
    path.write_bytes(b"\x00" * 101)
    with pytest.raises(DataError, match=r"odd.bin: 101 bytes is not a whole number of uint16"):
        TokenFile(path, "uint16-tokens", seq_len=SEQ, vocab=VOCAB)
    path.write_bytes(b"\x00" * 2 * SEQ)
    with pytest.raises(DataError, match=r"odd.bin: 8 tokens, fewer than one sample"):
        TokenFile(path, "uint16-tokens", seq_len=SEQ, vocab=VOCAB)
    with pytest.raises(DataError, match=r"missing.bin: cannot read"):
        TokenFile(tmp_path / "missing.bin", "uint16-tokens", seq_len=SEQ, vocab=VOCAB)


def test_out_of_vocabulary_token_names_file_and_position(tmp_path: Path) -> None:
    """Checked when a window holding it is read (windows 4, as last target, and 5): the error
    gives the file and the token position."""
    tokens = tiny_corpus(VOCAB, 12 * SEQ + 1, seed=1)
    tokens[5 * SEQ] = VOCAB + 5
    path = tmp_path / "bad.bin"
    write_token_file(path, tokens, "uint16-tokens")
    file = TokenFile(path, "uint16-tokens", seq_len=SEQ, vocab=VOCAB)
    file.windows_of(np.array([0, 1, 2, 3, 6]))
    expected = f"bad.bin: token id {VOCAB + 5} at token position {5 * SEQ} .byte"
    with pytest.raises(DataError, match=expected):
        file.windows_of(np.array([0, 5]))
    with pytest.raises(DataError, match=expected):
        file.windows_of(np.array([4]))
    data = _data(path, [8], 1)
    with pytest.raises(DataError, match=expected):
        for step in range(2):
            data.global_batch(step)


def test_synthetic_tokens_are_in_range_and_the_same_in_another_process() -> None:
    """A pure function of (seed, position, offset): another interpreter computes the same."""
    tokens = SyntheticTokens(seed=7, seq_len=SEQ, vocab=VOCAB)
    samples = tokens.samples(np.arange(1000, 1064, dtype=np.int64))
    assert samples.min() >= 0 and samples.max() < VOCAB
    assert len(np.unique(samples)) > 400, "576 uniform draws from 1000 ids give about 438 ids"
    script = (
        "import numpy as np, sys; from hetc.runtime.data import SyntheticTokens; "
        f"t = SyntheticTokens(seed=7, seq_len={SEQ}, vocab={VOCAB}); "
        "sys.stdout.write(t.samples(np.arange(1000, 1064)).tobytes().hex())"
    )
    other = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert other.stdout == samples.tobytes().hex()
    assert not np.array_equal(
        SyntheticTokens(seed=8, seq_len=SEQ, vocab=VOCAB).samples(np.arange(4)),
        tokens.samples(np.arange(4)),
    )


@pytest.mark.parametrize("path", ["synthetic", None])
def test_synthetic_is_chosen_by_path_or_absent_data(path: str | None) -> None:
    data_record = None if path is None else {"path": SYNTHETIC, "format": "uint16-tokens"}
    data = TrainingData.from_training(
        _record(data_record), base_dir=Path("/nonexistent"), shares=[8], micro=1
    )
    assert isinstance(data.tokens, SyntheticTokens)
    assert data.position(0).tokens is None


@pytest.mark.parametrize("synthetic", [False, True])
def test_resume_from_a_saved_position_continues_identically(corpus: Path, synthetic: bool) -> None:
    """Save at step 3 (through JSON), restore in a fresh object under another plan: steps 3..8
    are the uninterrupted run's, microbatch for microbatch."""
    path = None if synthetic else corpus
    uninterrupted = _data(path, [5, 3], 1)
    expected = [_concatenated(uninterrupted, step) for step in range(9)]
    saved = json.dumps(uninterrupted.position(3).to_json())
    resumed = _data(path, [2, 2], 2)
    step = resumed.resume(DataPosition.from_json(json.loads(saved)))
    assert step == 3
    for k in range(step, 9):
        assert np.array_equal(_concatenated(resumed, k), expected[k])


def test_resume_into_another_stream_is_refused(corpus: Path) -> None:
    position = _data(corpus, [8], 1).position(3)
    with pytest.raises(DataError, match="seed 7 -> 8"):
        _data(corpus, [8], 1, seed=8).resume(position)
    with pytest.raises(DataError, match="tokens 100 -> None"):
        _data(None, [8], 1).resume(position)
    with pytest.raises(DataError, match="keys"):
        DataPosition.from_json({"step": 3})
    with pytest.raises(DataError, match="step is -1"):
        DataPosition.from_json({**position.to_json(), "step": -1})


def test_microbatches_land_on_the_requested_device(corpus: Path) -> None:
    data = TrainingData.from_training(
        _record({"path": corpus.name, "format": "uint16-tokens"}),
        base_dir=corpus.parent,
        shares=[8],
        micro=1,
        device="meta",
    )
    inputs, targets = data.microbatch(0, 0, 0)
    assert inputs.device.type == targets.device.type == "meta"


def test_tiny_corpus_is_deterministic_learnable_and_in_range() -> None:
    """Mostly a cycle: the next token follows from the current one in about 7 of 8 places."""
    corpus = tiny_corpus(100, 4096, seed=5)
    assert np.array_equal(corpus, tiny_corpus(100, 4096, seed=5))
    assert not np.array_equal(corpus, tiny_corpus(100, 4096, seed=6))
    assert corpus.min() >= 0 and corpus.max() < 100
    pairs = list(zip(corpus[:-1].tolist(), corpus[1:].tolist(), strict=True))
    followers: dict[int, Counter[int]] = {}
    for a, b in pairs:
        followers.setdefault(a, Counter())[b] += 1
    likeliest = {a: counts.most_common(1)[0][0] for a, counts in followers.items()}
    assert sum(likeliest[a] == b for a, b in pairs) > 0.8 * len(pairs)


def test_write_token_file_refuses_ids_its_format_cannot_hold(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"\[0, 65536\)"):
        write_token_file(tmp_path / "t.bin", [1, 65536], "uint16-tokens")
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        write_token_file(tmp_path / "t.bin", [1, 10], "uint32-tokens", vocab=10)
    with pytest.raises(ValueError, match="unknown format"):
        write_token_file(tmp_path / "t.bin", [1], "int8-tokens")
