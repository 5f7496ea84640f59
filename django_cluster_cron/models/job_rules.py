"""What makes a job valid (:class:`JobRules`, a base of ``JobDefinition``): every field's rules
at once, each error on its own field, and its name free among live jobs."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from .. import validation
from ..validation import LIVE_NAME_TAKEN


class JobRules(models.Model):
    """``JobDefinition``'s ``full_clean()``/``clean()``: the definition's rules
    (:func:`~django_cluster_cron.validation.definition_errors`) and the live name's uniqueness."""

    if TYPE_CHECKING:  # JobDefinition's fields that the rules read
        name: str
        deleted_at: datetime | None

    class Meta:
        abstract = True

    # Fields full_clean() was told not to check (a form's fields that failed already).
    _clean_exclude: frozenset[str] = frozenset()

    def full_clean(self, exclude: Iterable[str] | None = None, *args: Any, **kwargs: Any) -> None:
        self._clean_exclude = frozenset(exclude or ())
        try:
            super().full_clean(set(self._clean_exclude), *args, **kwargs)
        finally:
            self._clean_exclude = frozenset()

    def clean(self) -> None:
        errors = validation.definition_errors(self, timezone.now())
        try:
            self.check_live_name()
        except ValidationError as exc:
            errors = {"name": [exc], **errors}
        # A field left out of the check (the form refused its input) holds no value worth
        # judging: its own error is the one to show, not "empty" for what was never set.
        errors = {name: found for name, found in errors.items() if name not in self._clean_exclude}
        if errors:
            raise ValidationError(errors)

    # Declarations are validated without the database (at `manage.py check`): they skip this.
    check_name_in_database = True

    def check_live_name(self) -> None:
        """No other live job has this name (one query; the database enforces it too)."""
        if self.deleted_at is not None or not self.name or not self.check_name_in_database:
            return
        taken = type(self)._base_manager.filter(name=self.name, deleted_at__isnull=True)
        if taken.exclude(pk=self.pk).exists():
            raise ValidationError(LIVE_NAME_TAKEN, code="unique")

    def validate_constraints(self, exclude: Collection[str] | None = None) -> None:
        # The live-name constraint is checked by clean(), on the name field, with one query.
        super().validate_constraints(exclude={*(exclude or ()), "deletion_id"})
