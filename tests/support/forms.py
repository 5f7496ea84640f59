"""What a browser would post: the fields of a rendered HTML form, read from the page itself.

A test that posts a hand-written dict can send fields the page never shows (and so pass where a
user fails); :func:`posted_fields` sends exactly what the form holds, as a browser submits it.
"""

from __future__ import annotations

from html.parser import HTMLParser


class _FormReader(HTMLParser):
    def __init__(self, form_id: str) -> None:
        super().__init__(convert_charrefs=True)
        self.form_id = form_id
        self.inside = False
        self.fields: list[tuple[str, str]] = []
        self._select: str | None = None
        self._options: list[tuple[str, bool]] = []
        self._option_value: str | None = None
        self._option_text = ""
        self._option_selected = False
        self._textarea: str | None = None
        self._text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: (v if v is not None else "") for k, v in attrs}
        if tag == "form" and a.get("id") == self.form_id:
            self.inside = True
            return
        if not self.inside or "disabled" in a:
            return
        name = a.get("name")
        if tag == "input" and name:
            kind = a.get("type", "text").lower()
            if kind in ("submit", "button", "image", "reset", "file"):
                return
            if kind in ("checkbox", "radio"):
                if "checked" in a:
                    self.fields.append((name, a.get("value", "on")))
                return
            self.fields.append((name, a.get("value", "")))
        elif tag == "select" and name:
            self._select, self._options = name, []
        elif tag == "option" and self._select is not None:
            self._option_value = a.get("value")
            self._option_text = ""
            self._option_selected = "selected" in a
        elif tag == "textarea" and name:
            self._textarea, self._text = name, ""

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._text += data
        elif self._select is not None:
            self._option_text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self.inside:
            self.inside = False
        elif tag == "option" and self._select is not None:
            value = self._option_value if self._option_value is not None else self._option_text
            self._options.append((value, self._option_selected))
            self._option_value = None
        elif tag == "select" and self._select is not None:
            chosen = [v for v, selected in self._options if selected]
            if not chosen and self._options:
                chosen = [self._options[0][0]]  # a browser sends the first option
            self.fields.extend((self._select, v) for v in chosen)
            self._select = None
        elif tag == "textarea" and self._textarea is not None:
            # A browser drops the one newline right after <textarea>.
            self.fields.append((self._textarea, self._text.removeprefix("\n")))
            self._textarea = None


def posted_fields(html: str, form_id: str) -> dict[str, str]:
    """The fields the form ``form_id`` of ``html`` submits, as a browser sends them (checked
    boxes only, the selected option, a textarea's text); a name sent twice keeps its last."""
    reader = _FormReader(form_id)
    reader.feed(html)
    if not reader.fields:
        raise AssertionError(f"no form with id {form_id!r} (or no fields in it) on the page")
    return dict(reader.fields)
