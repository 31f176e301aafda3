"""`render`: the files of an `explain` result, its PNGs and one self-contained HTML
page with the pictures and the text, each word shaded by the [CLS] attention it
receives."""

import html
from pathlib import Path
from typing import List

from ..plots import embedded_png
from .pictures import draw_cls, draw_heads, draw_layer, head_words, matplotlib_figure
from .types import ExplainResult, WordAttention


def render(result: ExplainResult, output_dir: Path, source: str = "") -> List[Path]:
    """Write the PNGs and the HTML page of a result into `output_dir`.

    result (ExplainResult): What `explain` computed.
    output_dir (Path): The folder (created if missing).
    source (str): The encoder's checkpoint, named on the page.
    RETURNS (List[Path]): The files written; also set on `result`.
    """
    matplotlib_figure()  # fail before anything is written when matplotlib is missing
    output_dir.mkdir(parents=True, exist_ok=True)
    files: List[Path] = []
    for layer in result.layers:
        files.append(draw_layer(result, layer, output_dir / f"attention_layer{layer}.png"))
        if len(result.heads) > 1:
            files.append(
                draw_heads(result, layer, output_dir / f"attention_layer{layer}_heads.png")
            )
    files.append(draw_cls(result, output_dir / "cls_attention.png"))
    page = output_dir / "explain.html"
    page.write_text(_html(result, files, source), encoding="utf8")
    result.files = files + [page]
    result.html = page
    return result.files


def _shaded(text: str, words: List[WordAttention], largest: float) -> str:
    """The text as HTML, each word's background shaded by its [CLS] attention."""
    out: List[str] = []
    position = 0
    for word in words:
        out.append(html.escape(text[position : word.start]))
        chunk = html.escape(text[word.start : word.end])
        if word.score is None:
            out.append(f'<span class="w out" title="outside the explained window">{chunk}</span>')
        else:
            alpha = word.score / largest if largest > 0 else 0.0
            out.append(
                f'<span class="w" style="background: rgba(253, 141, 60, {alpha:.3f})" '
                f'title="[CLS] attention {word.score:.4f}">{chunk}</span>'
            )
        position = word.end
    out.append(html.escape(text[position:]))
    return "".join(out)


def _html(result: ExplainResult, images: List[Path], source: str) -> str:
    maps = result.attention
    main = result.layers[0]
    scored = [w.score for w in result.words if w.score is not None]
    largest = max(scored) if scored else 0.0
    text_words = [w for w in result.words if not w.is_question]
    text = result.text
    sections = []
    if result.question is not None:
        q_words = [w for w in result.words if w.is_question]
        sections.append(
            f'<p class="label">Question</p><p class="text">'
            f"{_shaded(result.question, q_words, largest)}</p>"
        )
        sections.append('<p class="label">Context</p>')
    sections.append(f'<p class="text">{_shaded(text, text_words, largest)}</p>')
    specials = {
        tok: float(result.cls_attention[main, i])
        for i, tok in enumerate(maps.tokens)
        if maps.offsets[i, 0] < 0
    }
    special_note = ", ".join(f"{tok} {value:.3f}" for tok, value in specials.items())
    top = sorted((w for w in result.words if w.score is not None), key=lambda w: -(w.score or 0.0))[
        :10
    ]
    rows = "".join(
        f"<tr><td>{html.escape(w.text)}{' (question)' if w.is_question else ''}</td>"
        f"<td>{w.score:.4f}</td></tr>"
        for w in top
    )
    window = ""
    if maps.n_windows > 1:
        window = (
            f"<p>The text needs {maps.n_windows} windows; this is window {maps.window} "
            f"(wordpieces {maps.pieces[0]} to {maps.pieces[1] - 1} of {maps.n_pieces}). "
            "Words outside it are not shaded.</p>"
        )
    if maps.question_truncated:
        window += "<p>The question was cut to the component's max_question_len.</p>"
    figures = "".join(embedded_png(p, p.stem) for p in images)
    encoder = html.escape(result.encoder_component)
    if result.encoder_component != result.component:
        encoder += f" (the shared encoder of {html.escape(result.component)})"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Attention of {html.escape(result.component)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222;
  padding: 0 1em; }}
.text {{ font-size: 1.4em; line-height: 2; white-space: pre-wrap; }}
.w {{ border-radius: 3px; padding: 0.1em 0.05em; }}
.out {{ color: #999; }}
.label {{ font-weight: bold; margin-bottom: 0; }}
.note {{ color: #555; font-size: 0.9em; }}
table {{ border-collapse: collapse; }} td {{ padding: 0.1em 1em 0.1em 0; }}
figure {{ margin: 1.5em 0; }} img {{ max-width: 100%; height: auto; }}
</style>
</head>
<body>
<h1>Attention of {encoder}</h1>
<p>Encoder: {html.escape(source) or "?"}; {maps.n_layers} layers x {maps.n_heads} heads,
{len(maps.tokens)} wordpieces in this window.</p>
{window}
<h2>[CLS] attention over the text</h2>
<p>Each word is shaded by the attention [CLS] pays to its wordpieces (summed) in layer
{main}, {html.escape(head_words(result))}; hover over a word for the value. The special
tokens take the rest: {html.escape(special_note)}.</p>
{"".join(sections)}
<table><tr><th align="left">word</th><th align="left">[CLS] attention</th></tr>{rows}</table>
{"".join(f'<p class="note">{html.escape(note)}</p>' for note in result.notes)}
<p class="note">Attention shows where each layer looks, not why the model decides:
heads mix their inputs through later layers, and attention to a word is not its
importance for the prediction. Read these pictures as one view of the computation,
not as an explanation.</p>
<h2>Pictures</h2>
{figures}
</body>
</html>
"""
