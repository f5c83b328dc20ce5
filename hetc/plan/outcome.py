"""How a rank's run ends: the exit codes the runtime returns and every launch path (node
scripts, Slurm, `hetc launch`) and the `hetc run` supervisor act on.

A launcher must tell apart a run that finished, one that can go on from its last checkpoint
on the nodes still there (a peer was lost, or the ranks were asked to stop and saved), and
one that cannot (bad input, a bug): only the middle two are worth a restart or a re-plan.
"""

from __future__ import annotations

EXIT_DONE = 0
"""Every step of the run trained (and the final checkpoint, if any, is complete)."""
EXIT_FAILED = 1
"""Training cannot go on as compiled: bad or inconsistent input, a bug; one line said why.
Restarting the same compiled output would fail the same way."""
EXIT_PEER_LOST = 75
"""Another rank of the plan was lost (it died, or stopped answering its heartbeat): the
survivors stopped; the run can resume from its last complete checkpoint on the nodes left
(EX_TEMPFAIL in sysexits.h)."""
EXIT_PREEMPTED = 76
"""The ranks were told to stop (SIGTERM: a spot preemption, a scheduler's stop) and stopped
cleanly after saving a checkpoint within the grace period."""

RESTARTABLE = frozenset({EXIT_PEER_LOST, EXIT_PREEMPTED})
"""Codes after which resuming (on the same or another plan) makes progress."""
