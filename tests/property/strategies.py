"""Hypothesis strategies for text that breaks naive code, and the suite's settings.

Every property test runs a fixed number of derandomized examples, so CI sees
the same examples on every run (and the whole suite stays within its budget).
"""

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# The same examples on every run, and no example database (nothing written to the
# checkout); no per-example deadline (the first call of a tokenizer or of
# spaCy's blank pipeline is slow).
PROPERTY = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

NASTY = [
    "\u0301",  # combining acute accent
    "\u0308\u0308",  # stacked combining marks
    "\u200b",  # zero-width space
    "\u200c",  # zero-width non-joiner
    "\u200d",  # zero-width joiner
    "\u2060",  # word joiner
    "\ufeff",  # byte order mark / zero-width no-break space
    "\u200e",  # left-to-right mark
    "\u200f",  # right-to-left mark
    "\u202e",  # right-to-left override
    "\u2066",  # left-to-right isolate
    "\u05e9\u05dc\u05d5\u05dd",  # Hebrew
    "\u0645\u0631\u062d\u0628\u0627",  # Arabic
    "\x00",
    "\x07",
    "\x1b",
    "\x1f",
    "\x7f",
    "\x85",  # next line (C1)
    "\u2028",  # line separator
    "\u2029",  # paragraph separator
    "\r",
    "\r\n",
    "\t",
    "\n",
    "\x0b",
    "\x0c",
    " ",
    "  ",
    "\u00a0",  # no-break space
    "\u3000",  # ideographic space
    "\U0001f469\u200d\U0001f469\u200d\U0001f467",  # family emoji (ZWJ sequence)
    "\U0001f1fa\U0001f1f3",  # flag: two regional indicators
    "\ufdfa",  # one character that normalizes to 18
    "\u01c4",  # DŽ, title case differs from upper case
    "\u0130",  # İ, lowercases to two characters
    "\u00df",  # ß, uppercases to two characters
    "\ufb03",  # ﬃ ligature
    "\u4e2d\u6587",  # CJK
    "e\u0301",
    "paris",
    "new york",
    "-",
    ".",
    "'",
    '"',
    ",",
    "|",
]
# Lone surrogates: only formats that escape them (JSON's \ud800) can carry them.
SURROGATES = ["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d"]

_pieces = st.one_of(
    st.sampled_from(NASTY),
    st.characters(codec="utf-8"),
    st.text(st.characters(codec="utf-8"), max_size=6),
    # very long tokens
    st.builds(
        lambda c, n: c * n,
        st.sampled_from(["a", "\u00e9", "\u4e2d", "x\u0301"]),
        st.integers(100, 700),
    ),
)


def texts(max_pieces: int = 30, surrogates: bool = False) -> st.SearchStrategy[str]:
    """Text mixing the nasty cases above with arbitrary characters."""
    pieces = st.one_of(_pieces, st.sampled_from(SURROGATES)) if surrogates else _pieces
    return st.lists(pieces, max_size=max_pieces).map("".join)
