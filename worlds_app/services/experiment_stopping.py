"""A stopping rule's steps (docs/designs.md, "Stopping early"): when every world of an
experiment with ``stopping`` is done and measured, the rule looks (``experiment_results``
computes the e-process at every look); if it neither rejected nor reached
``max_replicates``, ``every`` more replicates (fewer at the end) are added; else its end is
written to the experiment's history (until then the experiment reads ``running``). Called by the
measure task after it writes, so the look follows the last measurement. The looks themselves
are not stored: they are recomputed from the measurements at their replicate counts (the
schedule is fixed by the design), so the results always show every look."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from worlds_app.experiment_selectors import stopping_ended
from worlds_app.models import AttemptStatus, Experiment, TurnAttempt

STOPPING_RULE = "stopping rule"


def stopping_step(*, experiment_id: int) -> int:
    """The replicates added (0: nothing to do — no rule, worlds still running, or the rule
    has ended)."""
    from worlds_app.experiment_results import experiment_results
    from worlds_app.services.experiments import experiment_add_replicates

    experiment = Experiment.objects.filter(pk=experiment_id).first()
    if experiment is None or experiment.cancelled_at is not None:
        return 0
    design = experiment.typed_design
    stopping = design.stopping
    if stopping is None or stopping_ended(experiment.history):
        return 0
    busy = TurnAttempt.objects.filter(
        Q(status=AttemptStatus.QUEUED) | Q(status=AttemptStatus.RUNNING),
        world__experiment_id=experiment_id,
    )
    if busy.exists():
        return 0
    found = experiment_results(slug=experiment.slug).stopping
    if found is None or not found.looks:
        return 0
    last = found.looks[-1]
    if last.replicates != design.replicates:
        return 0
    if last.decision != "continue":
        _record_end(
            experiment.pk,
            f"{found.reason} at {last.replicates} replicates (e = {last.e_value:.4g}, boundary {last.boundary:g})",
        )
        return 0
    count = min(stopping.every, stopping.max_replicates - design.replicates)
    experiment_add_replicates(
        slug=experiment.slug,
        count=count,
        created_by=STOPPING_RULE,
        expect_replicates=design.replicates,
    )
    return count


def _record_end(experiment_id: int, detail: str) -> None:
    """The rule's end in the experiment's history, once (the experiment is ``completed`` only
    after it)."""
    with transaction.atomic(durable=True):
        experiment = Experiment.objects.select_for_update().get(pk=experiment_id)
        if stopping_ended(experiment.history):
            return
        entry = {
            "at": timezone.now().isoformat(),
            "change": "stopping",
            "detail": detail,
            "by": STOPPING_RULE,
        }
        experiment.history = [*experiment.history, entry]
        experiment.save(update_fields=["history"])
