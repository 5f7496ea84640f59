"""JSON typed by a person (the admin's form fields, the terminal's options): a parse error says
what is wrong, where, and what to write instead (json's own "Expecting property name enclosed in
double quotes: line 1 column 2 (char 1)" does not)."""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ValidationError

from . import MAX_JSON_DEPTH

# What each JSON field of a job takes, as its refusal says it.
EXAMPLES = {
    "args": 'a list, such as [1, "two"] (or [] for none)',
    "kwargs": 'an object, such as {"limit": 10} (or {} for none)',
    "pieces_required": "a list of piece indexes, such as [0, 3] (or [] for none)",
    "retention": 'an object, such as {"success": 7, "failed": 365} (or nothing)',
    "keep_last": 'a number, such as 10, or an object, such as {"failed": 20}',
}


def parse_json(value: str, example: str) -> Any:
    """``value`` read as JSON, or ValidationError("Not valid JSON: … at character 2. Write …")."""
    try:
        return json.loads(value)
    except RecursionError:  # some Pythons read deeper than others: the same words
        raise ValidationError(
            "Lists and objects nest more than %(depth)s levels deep. Write %(example)s.",
            code="too_deep",
            params={"depth": MAX_JSON_DEPTH, "example": example},
        ) from None
    except json.JSONDecodeError as exc:
        where = (
            f"line {exc.lineno}, column {exc.colno}"
            if "\n" in value.strip()
            else (f"character {exc.pos + 1}")
        )
        hint = " JSON strings take double quotes." if "'" in value else ""
        raise ValidationError(
            "Not valid JSON: %(problem)s at %(where)s.%(hint)s Write %(example)s.",
            code="invalid",
            params={
                "problem": exc.msg.lower(),
                "where": where,
                "hint": hint,
                "example": example,
            },
        ) from None
