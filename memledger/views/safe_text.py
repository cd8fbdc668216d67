"""Text from a link is text: escaping for each place a link-carried string is shown.

A share link carries an imported model's name (inside `model=spec:`), and a link is input from
anyone, so the name reaches every viewer. Streamlit renders headers, captions, errors and radio
labels as Markdown (links, images, bold, `:red[...]` colour directives, `:emoji:` shortcodes,
`$...$` LaTeX), and Plotly renders a subset of HTML in titles and labels (`<a href>`, `<b>`,
`<br>`). `md` makes a string literal Markdown, `plot` literal Plotly text; both also flatten
control characters and cut the string to `MAX_CHARS`, since no name needs a second line.
Sources: CommonMark 0.31 §2.4 (any ASCII punctuation may be backslash-escaped); plotly.js
src/lib/svg_text_utils.js (the tags it renders; it decodes &lt; &gt; &amp; entities back to text).
"""
from __future__ import annotations

import html
import re

MAX_CHARS = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$:=\"'&@^%])")


def plain(text: object, max_chars: int = MAX_CHARS) -> str:
    """One line of at most max_chars characters (control characters become one space)."""
    s = _CONTROL.sub(" ", str(text))
    return s if len(s) <= max_chars else s[: max_chars - 1] + "…"


def md(text: object, max_chars: int = MAX_CHARS) -> str:
    """Literal text inside Streamlit Markdown: every punctuation character backslash-escaped."""
    return _MD_SPECIAL.sub(r"\\\1", plain(text, max_chars))


def plot(text: object, max_chars: int = MAX_CHARS) -> str:
    """Literal text inside a Plotly title, label or annotation: HTML-escaped."""
    return html.escape(plain(text, max_chars), quote=True)
