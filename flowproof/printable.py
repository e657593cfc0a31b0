"""Text for a terminal: recorded and agent-printed text shown, never obeyed.

A recorded reply, a tool argument or an agent's output may hold terminal escape
sequences: a window title, OSC 52 (which writes the reviewer's clipboard), cursor
movement that paints over what a report said. Printed raw, they act on whoever
reads ``flowproof show``, ``flowproof diff`` or a run's report. `printable` shows
every such character as an escape (``\\x1b``, ``\\u202e``), as the HTML report
does, and leaves the text otherwise as it is: tabs and line breaks stay, and a
backslash stays a backslash.

Pure.

>>> printable("booked\\x1b]52;c;cm0gLXJmIH4=\\x07 ok")
'booked\\\\x1b]52;c;cm0gLXJmIH4=\\\\x07 ok'
>>> printable("line 1\\r\\nline 2")
'line 1\\nline 2'
"""

from __future__ import annotations

import re

__all__ = ["UNPRINTABLE", "printable"]

#: C0 controls but tab and line feed (a lone CR moves the cursor), DEL and the C1 controls
#: (U+009B is CSI to many terminals), the bidirectional overrides and isolates (they reorder
#: what is shown), lone surrogates and the non-characters U+FFFE/U+FFFF.
UNPRINTABLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every character that acts on a terminal shown as its escape; a CRLF
    line break (Windows output) is a line break."""
    if not UNPRINTABLE.search(text):
        return text
    return UNPRINTABLE.sub(_escape, text.replace("\r\n", "\n"))
