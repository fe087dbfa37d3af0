"""Steps we already decided: certificates for peers still deciding them, and conflicting claims.

A replica that decided a step holds its certificate: the signed precommits of a quorum of the step's roster
(:mod:`.agreement`). A peer still in that step (its status says so) is sent the certificate with the list,
and decides from it on its own check, without trusting the sender; so a laggard catches up whoever answers,
and a stranger cannot talk it into anything.

A different list for a decided step is only a conflict when it comes with its own certificate, which means
more than f peers signed both ways: reported loudly (``ListConflict``), never answered with a resync.
Anything less (a later epoch's proposal, a few votes) is a claim, not a decision: an honest leader that
missed the decision may well propose something else, and nothing can decide it, so it is counted and
dropped.
"""

from __future__ import annotations

from ..ballots import PRECOMMIT, Certificate, Status
from ..inclusion_list import InclusionList
from ..membership import Roster
from .actions import Action, ListConflict, Publish
from .agreement import decide, quorum_ballots
from .context import Local
from .round_state import RoundState
from .window import StepWindow


def on_decided_proposal(rnd: RoundState, lst: InclusionList, me: Local) -> None:
    """A proposal for a step we decided: the same list again is a duplicate, any other a mere claim."""
    me.counters.count("duplicate_list" if lst.digest() == rnd.decided_digest else "conflicting_claim")


def check_decided_votes(rnd: RoundState, roster: Roster | None, me: Local, out: list[Action]) -> None:
    """After a vote for a decided step: a quorum of precommits for another list is a certificate for it."""
    if roster is None:
        return
    for ballot in quorum_ballots(rnd, PRECOMMIT, roster, me):
        if ballot[1] != rnd.decided_digest:
            voters = [p for p, _ in rnd.endorsements(PRECOMMIT, ballot, set(roster.eligible()))]
            _report_conflict(rnd, ballot[1], voters[0], me, out)
            return


def certified(cert: Certificate, roster: Roster, me: Local) -> bool:
    """Whether the certificate's precommits come from a quorum of the step's active roster (their
    signatures were checked at the gossip door)."""
    voters = [voter for voter, _ in cert.precommits]
    return all(roster.is_eligible(v) for v in voters) and len(voters) >= roster.vote_quorum(me.left())


def on_certificate(cert: Certificate, me: Local, window: StepWindow, out: list[Action]) -> bool:
    """Decide a step from a certificate, or report a certified conflict; True if the rules should run."""
    step = cert.step
    roster = window.rosters.get(step)
    if roster is None or step > window.frontier + me.config.max_future_steps:
        me.counters.count("stale_step" if step < window.frontier else "future_step")
        return False
    if not certified(cert, roster, me) or roster.check_list(cert.decided, me.rules) is not None:
        me.counters.count("conflicting_claim")  # (a list breaking the roster rules: more than f signed it)
        return False
    lst = cert.decided
    digest = lst.digest()
    done = window.decided_round(step)
    if done is not None:
        if digest != done.decided_digest:
            _report_conflict(done, digest, cert.precommits[0][0], me, out)
        else:
            me.counters.count("duplicate_list")
        return False
    if step != window.frontier:
        me.counters.count("future_step")  # its roster is a guess until the steps before it are decided
        return False
    rnd = window.open_round(step, me.now)
    rnd.contents.setdefault(digest, lst)
    decide(rnd, roster, (lst.epoch, digest), cert.precommits, window, me, out)
    return True


def _report_conflict(rnd: RoundState, digest: bytes, source: str, me: Local, out: list[Action]) -> None:
    me.counters.count("list_conflict")
    if rnd.decided_digest is None or rnd.conflict_reported:
        return
    rnd.conflict_reported = True
    out.append(ListConflict(rnd.step, rnd.decided_digest, digest, source, "certificate"))


def answer_laggard(
    rnd: RoundState, roster: Roster | None, status: Status, me: Local, out: list[Action]
) -> None:
    """Someone is still trying to decide a step we decided: send it our certificate.

    Answers are rate limited per step (newer epochs only, at most one per half leader timeout), so
    statuses from any peer, voter or not, cost a bounded amount of gossip.
    """
    if roster is None or rnd.decided is None or not rnd.certificate:
        return
    if status.epoch <= rnd.answered_epoch:
        return
    if rnd.answered_at is not None and me.now - rnd.answered_at < me.config.leader_timeout / 2:
        return
    rnd.answered_epoch = status.epoch
    rnd.answered_at = me.now
    out.append(Publish(Certificate(rnd.decided, rnd.certificate)))
