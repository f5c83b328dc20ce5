"""Each rank's heartbeat, and how the survivors learn that a peer is gone.

A rank that dies leaves its peers in gloo calls that fail with "Connection reset by peer"
(or, in a collective it never joined, that wait out the process group's timeout); a rank
that freezes (SIGSTOP, a hung driver, a swapped-out host) keeps its sockets open, and its
peers wait the whole timeout, 300 s by default, before anything says so. Neither names the
rank. So every rank runs a thread that beats and watches:

- Where: torchrun's c10d store (a TCPStore at MASTER_ADDR:MASTER_PORT), through a client
  connection of the thread's own. Every process of the job already reaches that store (it
  is how they met), across nodes and sites alike, whereas the run directory may not be
  shared between nodes. Each beat writes the rank's counter under its own key and reads
  every other rank's in one `multi_get`: W reads of a few bytes per rank per interval.
- Lost: a peer whose counter has not moved for the heartbeat timeout (default 30 s; the
  interval is a tenth of it, at most 1 s). Time is the watcher's own monotonic clock, so
  clocks of different hosts never meet. After the training loop saw a communication error
  (`after_error`), three missed intervals are enough: the error is already evidence, and a
  killed rank then is named in seconds, not after the whole timeout.
- One verdict: the first rank to convict a peer writes the verdict under one key by
  compare-and-set, and every rank adopts the verdict it finds there; so all survivors name
  the same rank.
- A peer that stopped on its own (a failure, a preemption) publishes its exit code and reason
  first (`publish_exit`); its watchers adopt that instead of calling it lost.
- The store itself: in a job started without torchrun's agent store, plan rank of torch rank
  0 hosts it; an unreachable store for the whole timeout (a few intervals once a
  communication error was seen) is that host lost. A host that ends on its own waits, a few
  intervals at most, until its peers have published their ends, so that the store and the
  verdict in it outlive their readers.
- A watcher that was itself frozen (its loop ran late by more than half the timeout) cannot
  judge the time it missed and restarts its clocks; if its peers meanwhile convicted it, it
  finds the verdict naming itself and stops too.

A decision ends the process from this thread (`hetc.runtime.ending`): the main thread may be
inside a gloo call that only a timeout would return from. So the process group's timeout
(`--timeout`, 300 s by default) is only a backstop and must exceed the heartbeat timeout,
which the runtime checks: the heartbeat decides first.

The same thread also ends a rank whose SIGTERM grace period ran out before its checkpoint was
complete (`hetc.runtime.signals`), and a torchrun worker whose agent is gone (its parent
changed): torchrun starts its workers in sessions of their own, so a node script or agent
killed outright (SIGKILL to its process group, an OOM kill) leaves them running, training on
with the other nodes as if nothing happened, with no one left to stop or restart them. Such a
rank stops with exit 75 naming its own node, and its peers report that node lost.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from torch.distributed import TCPStore  # type: ignore[attr-defined]

from hetc.plan.outcome import EXIT_FAILED, EXIT_PEER_LOST, EXIT_PREEMPTED, LostPeer
from hetc.runtime.signals import Signals

if TYPE_CHECKING:
    from hetc.runtime.ending import Ending

SUSPECT_BEATS = 3
"""Missed intervals that convict a peer once a communication error was seen."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Peer:
    """A process of the plan, as its watchers name it."""

    rank: int
    node: str
    local_rank: int
    torch_rank: int

    def lost(self) -> LostPeer:
        return LostPeer(node=self.node, rank=self.rank, local_rank=self.local_rank)

    def name(self) -> str:
        return f"plan rank {self.rank} (node {self.node!r}, local rank {self.local_rank})"


def interval_for(timeout: float) -> float:
    """The beat interval: a tenth of the timeout, at most 1 s."""
    return min(1.0, timeout / 10)


def store_address() -> tuple[str, int]:
    """The c10d store every process of the job reached at start-up (torchrun sets both)."""
    return os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])


def key_prefix() -> str:
    """Keys of this job and restart attempt: torchrun reuses its store across restarts."""
    run = os.environ.get("TORCHELASTIC_RUN_ID", "run")
    return f"hetc-heartbeat/{run}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


class Heartbeat:
    """One rank's beating and watching thread (see the module docstring)."""

    def __init__(
        self,
        *,
        me: Peer,
        peers: Sequence[Peer],
        timeout: float,
        ending: Ending,
        signals: Signals,
        grace: float,
        store_host: Peer | None,
    ) -> None:
        self.me = me
        self.peers = [p for p in peers if p.rank != me.rank]
        self.timeout = timeout
        self.interval = interval_for(timeout)
        self.ending = ending
        self.signals = signals
        self.grace = grace
        self.store_host = store_host
        """The process that hosts the store (None under torchrun's agent store)."""
        self.address = store_address()
        self._prefix = key_prefix()
        self._store: TCPStore | None = None
        self._store_lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._beats = 0
        self._exit: dict[str, Any] | None = None
        """This rank's end, once published: every later beat carries it."""
        self._error_seen = False
        self._pending: dict[int, float] = {}
        """Peers seen with a failure exit record, since when (adopted a beat later)."""
        self._changed: dict[int, float] = {}
        """When each peer's counter was last seen to move (this rank's monotonic clock)."""
        self._before: dict[int, float] = {}
        """When it was seen to move the time before: two moves seen after an error prove a
        beat written after it (the first may be a dead peer's last)."""
        self._ended: set[int] = set()
        """Peers that published a clean end."""
        self._store_ok = time.monotonic()
        """When the store last answered: while it does not, the thread is the judge."""
        self.agent = os.getppid() if os.environ.get("TORCHELASTIC_RUN_ID") else None
        """torchrun's agent (this worker's parent), watched; None when not started by one."""

    def _key(self, rank: int) -> str:
        return f"{self._prefix}/rank-{rank}"

    @property
    def _verdict_key(self) -> str:
        return f"{self._prefix}/verdict"

    def connect(self) -> None:
        """Open the store client and beat once; every rank must then meet in a collective
        before `start`, so that every key exists when the first watcher reads it."""
        store_timeout = min(self.timeout / 2, max(2 * self.interval, 2.0))
        host, port = self.address
        self._store = TCPStore(
            host, port, is_master=False, timeout=timedelta(seconds=store_timeout)
        )
        self._beat()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hetc-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (the rank is ending on its own terms)."""
        self._stopped.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.timeout)

    def publish_exit(self, code: int, reason: str, lost: LostPeer | None) -> None:
        """Tell every watcher how this rank ends, so that it is not called lost (code 0) or its
        reason is what its peers report (others). Best effort: the store may be gone."""
        self._exit = {"code": code, "reason": reason, "lost": _lost_json(lost)}
        try:
            self._beat()
            self._linger(lost)
        except Exception:  # the store is gone: the watchers will call this rank lost
            return

    def _linger(self, lost: LostPeer | None) -> None:
        """Where this process hosts the store, stay until every other rank has published its
        end (or a few intervals passed): leaving at once would take the store, and with it
        the verdict, from ranks that have not read it yet."""
        if self.store_host is None or self.store_host.rank != self.me.rank:
            return
        waiting = [p for p in self.peers if lost is None or p.rank != lost.rank]
        deadline = time.monotonic() + 5 * self.interval
        while waiting and time.monotonic() < deadline:
            with self._store_lock:
                assert self._store is not None
                values = self._store.multi_get([self._key(p.rank) for p in waiting])
            waiting = [p for p, v in zip(waiting, values, strict=True) if not json.loads(v)["exit"]]
            time.sleep(self.interval / 4)

    def after_error(self) -> None:
        """The main thread saw a communication error: convict a silent peer after a few
        missed beats rather than the whole timeout, and wait for the verdict (which ends the
        process). Returns when there is none to wait for: every peer beat since the error
        (so none is lost and the error is this rank's own), or the timeout passed."""
        error_at = time.monotonic()
        self._error_seen = True
        deadline = error_at + self.timeout + 2 * self.interval
        while time.monotonic() < max(deadline, self._store_ok + self.timeout):
            if self._thread is None or not self._thread.is_alive():
                return
            alive = [self._before.get(p.rank, 0.0) > error_at for p in self.peers]
            if all(a or p.rank in self._ended for a, p in zip(alive, self.peers, strict=True)):
                return
            time.sleep(self.interval / 2)

    # -- the thread ------------------------------------------------------------------------

    def _beat(self) -> None:
        """Write this rank's counter (and its end, once published) under its key."""
        with self._store_lock:
            assert self._store is not None
            self._beats += 1
            value = json.dumps({"beat": self._beats, "exit": self._exit})
            self._store.set(self._key(self.me.rank), value)

    def _run(self) -> None:
        """Beat and watch until stopped or until a decision ends the process. A decision
        returns only where another thread is ending the process already: then stop too."""
        changed = self._changed
        changed.update({p.rank: time.monotonic() for p in self.peers})
        last: dict[int, Any] = {}
        self._store_ok = last_loop = time.monotonic()
        while not self._stopped.wait(self.interval):
            now = time.monotonic()
            if now - last_loop > max(3 * self.interval, self.timeout / 2):
                changed.update(dict.fromkeys(changed, now))  # this rank was frozen: no judging
                self._store_ok = now
            last_loop = now
            if self._grace_ran_out() or self._orphaned():
                return
            try:
                states, verdict = self._read()
                self._store_ok = now
            except Exception:  # a store error of any kind: judged by how long it lasts
                limit = SUSPECT_BEATS * self.interval if self._error_seen else self.timeout
                if time.monotonic() - self._store_ok > limit:
                    self._store_lost(time.monotonic() - self._store_ok)
                    return
                continue
            if verdict is not None:
                self._adopt(verdict)
                return
            limit = SUSPECT_BEATS * self.interval if self._error_seen else self.timeout
            silent: list[tuple[Peer, float]] = []
            for peer, state in zip(self.peers, states, strict=True):
                if state["exit"] is not None:
                    if self._peer_ended(peer, state["exit"], now):
                        return
                    continue
                if last.get(peer.rank) != state["beat"]:
                    self._before[peer.rank] = changed[peer.rank]
                    last[peer.rank], changed[peer.rank] = state["beat"], now
                elif now - changed[peer.rank] > limit:
                    silent.append((peer, now - changed[peer.rank]))
            if silent:
                self._convict(*silent[0])
                return

    def _read(self) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """Beat, then read every peer's state and the verdict, if any."""
        self._beat()
        with self._store_lock:
            assert self._store is not None
            values = self._store.multi_get([self._key(p.rank) for p in self.peers])
            verdict = None
            if self._store.check([self._verdict_key]):
                verdict = json.loads(self._store.get(self._verdict_key))
        return [json.loads(v) for v in values], verdict

    def _grace_ran_out(self) -> bool:
        left = self.signals.grace_left(self.grace)
        if left is None or left >= 0:
            return False
        self.ending.exit_now(
            EXIT_PREEMPTED,
            f"preempted: the grace period of {self.grace:g} s after SIGTERM ran out before a"
            " checkpoint was complete; stopped without one",
        )
        return True

    def _orphaned(self) -> bool:
        """The agent that started this worker is gone: end, naming this rank's node."""
        if self.agent is None or os.getppid() == self.agent:
            return False
        self.ending.exit_now(
            EXIT_PEER_LOST,
            f"peer lost: torchrun's agent on this node (pid {self.agent}) is gone, so this node"
            f" ({self.me.node!r}) is lost to the job; this rank stops",
            lost=self.me.lost(),
        )
        return True

    def _convict(self, peer: Peer, silent: float) -> None:
        """Propose `peer` as lost; adopt whichever verdict the store holds first."""
        proposed = json.dumps(
            {
                "lost": _lost_json(peer.lost()),
                "silent": round(silent, 1),
                "by": self.me.rank,
                "after_error": self._error_seen,
            }
        )
        try:
            with self._store_lock:
                assert self._store is not None
                agreed = json.loads(self._store.compare_set(self._verdict_key, "", proposed))
        except Exception:
            agreed = json.loads(proposed)  # no store: this rank's own verdict
        self._adopt(agreed)

    def _adopt(self, verdict: Mapping[str, Any]) -> None:
        lost = LostPeer(**verdict["lost"])
        silent = f"no heartbeat for {verdict['silent']:g} s"
        if verdict["after_error"]:
            silent = f"connection lost and {silent}"
        if lost.rank == self.me.rank:
            line = f"peer lost: this rank was declared lost by its peers ({silent})"
        else:
            who = next((p for p in self.peers if p.rank == lost.rank), None)
            name = who.name() if who is not None else f"plan rank {lost.rank}"
            line = f"peer lost: {name} stopped answering ({silent})"
        self.ending.exit_now(EXIT_PEER_LOST, line, lost=lost)

    def _peer_ended(self, peer: Peer, record: Mapping[str, Any], now: float) -> bool:
        """A peer published its end; act on a failure or a stop a beat later (unless the
        main thread already saw a communication error), so that a failure every rank
        reaches at once is reported by each rank in its own words. Returns whether it
        acted."""
        code = record["code"]
        if code == 0:
            self._ended.add(peer.rank)
            return False
        since = self._pending.setdefault(peer.rank, now)
        if not self._error_seen and now - since < self.interval:
            return False
        if code == EXIT_PEER_LOST and record["lost"] is not None:
            lost = LostPeer(**record["lost"])
            reason = f"{record['reason']} (as {peer.name()} found)"
            self.ending.exit_now(EXIT_PEER_LOST, reason, lost=lost)
        elif code == EXIT_PREEMPTED:
            self.ending.exit_now(EXIT_PREEMPTED, f"{peer.name()} stopped: {record['reason']}")
        else:
            self.ending.exit_now(EXIT_FAILED, f"{peer.name()} failed: {record['reason']}")
        return True

    def _store_lost(self, silent: float) -> None:
        host, port = self.address
        address = f"{host}:{port}"
        if self.store_host is not None and self.store_host.rank != self.me.rank:
            lost = LostPeer(
                node=self.store_host.node,
                rank=self.store_host.rank,
                local_rank=self.store_host.local_rank,
                address=address,
            )
            line = (
                f"peer lost: {self.store_host.name()}, which hosts the rendezvous store at"
                f" {address}, stopped answering (no reply for {silent:.1f} s)"
            )
        else:
            lost = LostPeer(node=None, rank=None, local_rank=None, address=address)
            line = (
                f"peer lost: the rendezvous store at {address} (torchrun's agent there)"
                f" stopped answering (no reply for {silent:.1f} s)"
            )
        self.ending.exit_now(EXIT_PEER_LOST, line, lost=lost)


def _lost_json(lost: LostPeer | None) -> dict[str, Any] | None:
    if lost is None:
        return None
    return {
        "node": lost.node,
        "rank": lost.rank,
        "local_rank": lost.local_rank,
        "address": lost.address,
    }
