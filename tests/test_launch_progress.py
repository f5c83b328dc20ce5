"""The progress lines of `hetc launch` and the numbers of its summary, from metrics lines
written here by hand (the runtime's format: hetc.runtime.session), against hand-computed
values."""

from __future__ import annotations

import json
from pathlib import Path

from hetc.launch_progress import PLAIN_EVERY, Board, MetricsTail, metrics_file, node_line
from hetc.launch_summary import final_loss, size, throughput


def _append(run_dir: Path, rank: int, *records: dict[str, object], end: str = "\n") -> None:
    path = metrics_file(run_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as file:
        file.write("".join(json.dumps(r) + end for r in records))


def test_the_tail_reads_only_lines_appended_after_it_started(tmp_path: Path) -> None:
    """Lines present at the start are skipped, a partial last line waits for its newline,
    and a line that is not a JSON object is passed over."""
    _append(tmp_path, 0, {"step": 7, "loss": 1.0})
    tail = MetricsTail(run_dir=tmp_path, ranks=[0, 1])
    _append(tmp_path, 0, {"step": 0, "loss": 2.0})
    path = metrics_file(tmp_path, 0)
    with open(path, "a", encoding="utf-8") as file:
        file.write('not json\n{"step": 1, "lo')
    tail.poll()
    assert [r["step"] for r in tail.records[0]] == [0]
    with open(path, "a", encoding="utf-8") as file:
        file.write('ss": 3.0}\n')
    tail.poll()
    assert [r["loss"] for r in tail.records[0]] == [2.0, 3.0]
    assert tail.records[1] == []


def test_a_node_line_takes_the_newest_step_of_its_ranks() -> None:
    """Step: the highest; loss: the rank that has one at that step (a stage before the last
    has none); samples/s: the mean of the ranks at that step."""
    records = {
        4: [{"step": 5, "loss": None, "samples_per_second": 10.0}],
        5: [
            {"step": 5, "loss": 2.5, "samples_per_second": 12.0},
            {"step": 6, "loss": 2.25, "samples_per_second": 20.0},
        ],
    }
    assert node_line("n", [4, 5], records) == "n: step 6, loss 2.2500, 20.0 samples/s"
    records[4].append({"step": 6, "loss": None, "samples_per_second": 30.0})
    assert node_line("n", [4, 5], records) == "n: step 6, loss 2.2500, 25.0 samples/s"
    assert node_line("n", [9], records) == "n: starting"


def _board(tmp_path: Path, *, terminal: bool) -> tuple[Board, list[str]]:
    written: list[str] = []
    tail = MetricsTail(run_dir=tmp_path, ranks=[0, 1])
    board = Board(
        nodes=[("a", [0]), ("b", [1])], tail=tail, write=written.append, terminal=terminal
    )
    return board, written


def test_on_a_terminal_the_lines_are_redrawn_in_place(tmp_path: Path) -> None:
    """The first draw prints both lines; a redraw moves up two lines and clears each; no
    change draws nothing."""
    board, written = _board(tmp_path, terminal=True)
    board.refresh(0.0)
    assert written == ["\x1b[2Ka: starting\n\x1b[2Kb: starting\n"]
    _append(tmp_path, 1, {"step": 0, "loss": 1.0, "samples_per_second": 4.0})
    board.refresh(0.1)
    board.refresh(0.2)
    assert written[1:] == [
        "\x1b[2F\x1b[2Ka: starting\n\x1b[2Kb: step 0, loss 1.0000, 4.0 samples/s\n"
    ]


def test_elsewhere_plain_lines_come_at_most_every_period(tmp_path: Path) -> None:
    """Without a terminal: a block at the first refresh, none within PLAIN_EVERY even when a
    node advanced, one after it, and the final refresh always shows the last numbers."""
    board, written = _board(tmp_path, terminal=False)
    board.refresh(0.0)
    _append(tmp_path, 0, {"step": 0, "loss": 1.0, "samples_per_second": 4.0})
    board.refresh(PLAIN_EVERY / 2)
    assert len(written) == 1
    board.refresh(PLAIN_EVERY)
    assert written[1] == "hetc: a: step 0, loss 1.0000, 4.0 samples/s\nhetc: b: starting\n"
    _append(tmp_path, 0, {"step": 1, "loss": 0.5, "samples_per_second": 8.0})
    board.refresh(PLAIN_EVERY + 1, final=True)
    assert written[2].startswith("hetc: a: step 1, loss 0.5000, 8.0 samples/s\n")
    board.refresh(PLAIN_EVERY * 3, final=True)
    assert len(written) == 3


def test_summary_numbers_by_hand() -> None:
    """Final loss from the lowest rank at the highest step; throughput = batch x steps /
    their seconds after two warm-up steps (8 x 3 / 1.5 = 16); sizes in binary units."""
    records = {
        0: [{"step": s, "loss": None, "seconds": x} for s, x in enumerate([9, 9, 0.5, 0.5, 0.5])],
        2: [{"step": 4, "loss": 3.0}],
        1: [{"step": 4, "loss": 2.0}, {"step": 3, "loss": 1.0}],
    }
    assert final_loss(records) == (2.0, 4)
    assert throughput(records[0], 8) == (16.0, 2, 4)
    assert throughput(records[0][:2], 8) == (8 * 2 / 18, 0, 1)
    assert final_loss({0: [{"step": 0, "loss": None}]}) is None
    assert [size(v) for v in (512, 2048, 5 * 2**20 + 2**19, 3 * 2**30)] == [
        "512 B",
        "2.0 KiB",
        "5.5 MiB",
        "3.0 GiB",
    ]
