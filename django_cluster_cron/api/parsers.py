"""How the API reads request bodies: JSON it can always decode, or a ``400`` saying why not.

DRF's own ``JSONParser`` lets a ``RecursionError`` escape (a body of 5,000 ``[``), which is a
``500``, and hands on numbers such as ``1e400`` as infinity, which no JSON reply or PostgreSQL
``jsonb`` column can hold. The API's views read JSON with :class:`ApiJSONParser` instead, whatever
the project's ``REST_FRAMEWORK`` settings say; other media types (forms) keep the project's
parsers.
"""

from __future__ import annotations

import codecs
import json
import math
from typing import Any, cast

from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser, JSONParser
from rest_framework.settings import api_settings

from ..validation import json_depth

# How deep a body may nest (the body's own object counts as one level). Far beyond any job's
# arguments, and far below the depth at which Python's JSON decoder gives up.
MAX_BODY_DEPTH = 200


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"the number {text[:40]} is beyond what a double can hold")
    return number


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def loads(text: str) -> Any:
    """``text`` as JSON, strictly; ``ValueError`` saying what is wrong with it otherwise."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite)
    except RecursionError:
        # Some Pythons read deeper than others: the same words as the check below.
        raise ValueError(f"it nests more than {MAX_BODY_DEPTH} levels deep") from None
    depth = json_depth(data, MAX_BODY_DEPTH)
    if depth > MAX_BODY_DEPTH:
        raise ValueError(f"it nests more than {MAX_BODY_DEPTH} levels deep")
    return data


class ApiJSONParser(JSONParser):
    """JSON, strictly: no ``NaN``/``Infinity``, no number beyond a double, at most
    :data:`MAX_BODY_DEPTH` levels deep. Anything else is a ``400`` (``{"detail": ...}``)."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        encoding = (parser_context or {}).get("encoding", "utf-8")
        try:
            return loads(codecs.getreader(encoding)(stream).read())
        except (ValueError, LookupError) as exc:  # UnicodeDecodeError is a ValueError
            raise ParseError(f"The body is not JSON the API can read: {exc}.") from None


def api_parser_classes() -> list[type[BaseParser]]:
    """:class:`ApiJSONParser` for JSON, then the project's parsers for every other media type."""
    configured = cast("list[type[BaseParser]]", api_settings.DEFAULT_PARSER_CLASSES)
    others = [
        parser
        for parser in configured
        if not issubclass(parser, JSONParser)
        and getattr(parser, "media_type", "") != ApiJSONParser.media_type
    ]
    return [ApiJSONParser, *others]
