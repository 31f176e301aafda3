"""`explain`: draw a component's encoder attention for one text.

Renders, into an output folder:
* `attention_layer<L>.png`: a heatmap (query wordpiece x attended wordpiece) of
  layer L, averaged over the chosen heads (or of the one chosen head);
* `attention_layer<L>_heads.png`: the chosen heads of layer L side by side;
* `cls_attention.png`: the attention from [CLS] to every wordpiece, as bars for the
  chosen layers and as a strip per layer of the encoder;
* `explain.html`: one self-contained page with the pictures and the text, each word
  shaded by the [CLS] attention it receives.

Layers and heads are numbered from 0, and negative numbers count from the end
(-1 is the last layer). A text longer than the encoder's window is explained one
window at a time (the first by default), with the window built as the component
builds it. Attention weights show where the model looks, not why it decides: read
them as a picture of one part of the computation, not as an explanation.
"""

import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy
from spacy.language import Language
from thinc.api import Model

from .models.attention import AttentionMaps, encoder_attention
from .models.listener import EncoderListener
from .pipeline.encoder import BertEncoderPipe
from .pipeline.ner import BertEntityRecognizer
from .pipeline.qa import BertQuestionAnswerer
from .pipeline.textcat import BertTextCategorizer
from .plots import embedded_png, figure_class


class ExplainError(ValueError):
    """An argument of `explain` does not fit the pipeline or the text."""


@dataclass
class WordAttention:
    """The [CLS] attention received by one spaCy token of the text or question.

    score (Optional[float]): The sum over the token's wordpieces of the attention
        from [CLS] (chosen heads averaged, first chosen layer); None when none of its
        wordpieces is in the explained window.
    """

    text: str
    start: int
    end: int
    score: Optional[float]
    is_question: bool = False


@dataclass
class EncoderTarget:
    """Which encoder a component runs, and how it builds its windows.

    component (str): The component asked about.
    encoder_component (str): The component that owns the encoder (differs from
        `component` for a listener of a shared `bert_encoder`).
    encoder (Model): The spacy-bert-pipes.BertEncoder.v1.
    pairs (bool): Whether the component encodes question and context pairs (bert_qa).
    window_settings (Dict[str, int]): max_length, stride (and max_question_length).
    questions (Dict[str, str]): The component's fixed questions (bert_qa).
    """

    component: str
    encoder_component: str
    encoder: Model
    pairs: bool = False
    window_settings: Dict[str, int] = field(default_factory=dict)
    questions: Dict[str, str] = field(default_factory=dict)


@dataclass
class ExplainResult:
    """What `explain` computed and wrote.

    text (str): The text explained (for bert_qa: the context).
    component (str): The component asked about.
    encoder_component (str): The component owning the encoder that ran.
    attention (AttentionMaps): Wordpieces and weights (layers, heads, seq, seq) of
        the explained window, all layers and heads.
    layers (List[int]): The chosen layers (0-based, in the order asked).
    heads (List[int]): The chosen heads (0-based).
    cls_attention (numpy.ndarray): Attention from [CLS] to each position, averaged
        over the chosen heads, for every layer. (layers, seq)
    words (List[WordAttention]): The question's (if any) and the text's spaCy tokens
        with the [CLS] attention they receive in the first chosen layer.
    question (Optional[str]): The question of a question and context pair.
    notes (List[str]): What to keep in mind when reading the pictures of this component.
    files (List[Path]): The files written (none without an output folder).
    html (Optional[Path]): The HTML page, if written.
    """

    text: str
    component: str
    encoder_component: str
    attention: AttentionMaps
    layers: List[int]
    heads: List[int]
    cls_attention: numpy.ndarray
    words: List[WordAttention]
    question: Optional[str] = None
    notes: List[str] = field(default_factory=list)
    files: List[Path] = field(default_factory=list)
    html: Optional[Path] = None

    @property
    def tokens(self) -> List[str]:
        return self.attention.tokens

    def head_mean(self, layer: int) -> numpy.ndarray:
        """Layer `layer`'s attention averaged over the chosen heads. (seq, seq)"""
        return self.attention.weights[layer, self.heads].mean(axis=0)


def explain(
    nlp: Language,
    text: str,
    *,
    component: Optional[str] = None,
    layers: Sequence[int] = (-1,),
    heads: Optional[Sequence[int]] = None,
    question: Optional[str] = None,
    window: int = 0,
    output_dir: Optional[Union[str, Path]] = None,
) -> ExplainResult:
    """Compute, and draw if `output_dir` is given, the attention of a component's
    encoder for a text.

    nlp (Language): A pipeline with a bert_encoder, bert_textcat, bert_ner or bert_qa.
    text (str): The text (for bert_qa: the context).
    component (Optional[str]): The component whose encoder to explain (default: the
        first component with one). A listener is explained through its upstream
        bert_encoder.
    layers (Sequence[int]): Layers to draw, 0-based; negative counts from the end.
    heads (Optional[Sequence[int]]): Heads to draw and average (default: all).
    question (Optional[str]): For bert_qa: the question paired with the text
        (default: the component's first fixed question).
    window (int): Which window of a text longer than the encoder's window (0-based).
    output_dir (Optional[Union[str, Path]]): Where to write the PNGs and HTML page;
        None only computes.
    RETURNS (ExplainResult): The weights, the chosen layers and heads and the files.
    """
    if not text.strip():
        raise ExplainError("The text is empty: there is nothing to explain")
    target = find_encoder(nlp, component)
    if target.pairs:
        if question is None:
            if not target.questions:
                raise ExplainError(
                    f"'{target.component}' encodes question and context pairs: give a "
                    "question (it has no fixed questions to take one from)"
                )
            question = next(iter(target.questions.values()))
        if not question.strip():
            raise ExplainError("The question is empty")
    elif question is not None:
        raise ExplainError(
            f"'{target.component}' encodes single texts; a question is only for a bert_qa component"
        )
    try:
        maps = encoder_attention(
            target.encoder, text, question=question, window=window, **target.window_settings
        )
    except ValueError as err:
        raise ExplainError(str(err)) from err
    if maps.pieces[1] == maps.pieces[0]:
        raise ExplainError(f"The text {text!r} has no wordpieces to explain")
    chosen_layers = _select(layers, maps.n_layers, "layer")
    chosen_heads = _select(range(maps.n_heads) if heads is None else heads, maps.n_heads, "head")
    # (layers, seq): the [CLS] row, averaged over the chosen heads
    cls_attention = maps.weights[:, chosen_heads, 0, :].mean(axis=1)
    words = _word_scores(nlp, text, question, maps, cls_attention[chosen_layers[0]])
    result = ExplainResult(
        text=text,
        component=target.component,
        encoder_component=target.encoder_component,
        attention=maps,
        layers=chosen_layers,
        heads=chosen_heads,
        cls_attention=cls_attention,
        words=words,
        question=question,
        notes=_notes(nlp, target.component),
    )
    if output_dir is not None:
        render(result, Path(output_dir), source=str(target.encoder.attrs.get("source", "")))
    return result


def find_encoder(nlp: Language, component: Optional[str] = None) -> EncoderTarget:
    """The encoder a component runs (default: the first component with one).

    nlp (Language): The pipeline.
    component (Optional[str]): A component name.
    RETURNS (EncoderTarget): The encoder and how the component builds its windows.
    """
    if component is None:
        for name, _ in nlp.pipeline:
            target = _target(nlp, name)
            if target is not None:
                return target
        raise ExplainError(
            "The pipeline has no component with a BERT encoder (its components: "
            f"{', '.join(nlp.pipe_names) or 'none'})"
        )
    if component not in nlp.pipe_names:
        raise ExplainError(
            f"The pipeline has no component '{component}' (its components: "
            f"{', '.join(nlp.pipe_names) or 'none'})"
        )
    target = _target(nlp, component)
    if target is None:
        with_encoder = [name for name in nlp.pipe_names if _target(nlp, name) is not None]
        raise ExplainError(
            f"'{component}' has no BERT encoder to explain (components with one: "
            f"{', '.join(with_encoder) or 'none'})"
        )
    return target


def _target(nlp: Language, name: str) -> Optional[EncoderTarget]:
    pipe = nlp.get_pipe(name)
    if isinstance(pipe, BertEncoderPipe):
        return EncoderTarget(name, name, pipe.model)
    model = getattr(pipe, "model", None)
    if not isinstance(model, Model) or not model.has_ref("encoder"):
        return None
    encoder = model.get_ref("encoder")
    if isinstance(encoder, EncoderListener):
        upstream, upstream_pipe = _upstream(nlp, name, encoder)
        return EncoderTarget(name, upstream, upstream_pipe.model)
    if encoder.name != "bert_encoder":
        return None
    if isinstance(pipe, BertQuestionAnswerer):
        settings = {
            "max_length": model.attrs["max_seq_len"],
            "stride": model.attrs["doc_stride"],
            "max_question_length": model.attrs["max_question_len"],
        }
        return EncoderTarget(name, name, encoder, True, settings, dict(pipe.cfg["questions"]))
    return EncoderTarget(name, name, encoder)


def _notes(nlp: Language, component: str) -> List[str]:
    """How the component reads the encoder, when [CLS] is not what its head reads."""
    pipe = nlp.get_pipe(component)
    if isinstance(pipe, BertTextCategorizer) and pipe.model.attrs.get("pooling") == "mean":
        return [
            f"'{component}' classifies the mean of all wordpiece vectors, not the [CLS] "
            "vector: the [CLS] row shows what [CLS] gathers, while every row of the "
            "heatmap feeds the classifier."
        ]
    if isinstance(pipe, BertEntityRecognizer):
        return [
            f"'{component}' tags each token from its own wordpiece vectors: a token's row "
            "in the heatmap shows what it gathers; the [CLS] row is only a summary."
        ]
    if isinstance(pipe, BertQuestionAnswerer):
        return [
            f"'{component}' scores answer starts and ends from each context wordpiece's "
            "vector (and the null answer from [CLS]): read the context rows of the heatmap."
        ]
    return []


def _upstream(nlp: Language, name: str, listener: EncoderListener) -> Tuple[str, BertEncoderPipe]:
    """The bert_encoder component a listener reads from."""
    for other, pipe in nlp.pipeline:
        if isinstance(pipe, BertEncoderPipe) and name in pipe.listening_components:
            return other, pipe
    before = nlp.pipeline[: nlp.pipe_names.index(name)]
    for other, pipe in reversed(before):
        if isinstance(pipe, BertEncoderPipe) and listener.upstream_name in ("*", other):
            return other, pipe
    raise ExplainError(
        f"'{name}' listens to {listener.upstream_label}, which is not in the pipeline"
    )


def _select(asked: Sequence[int], n: int, what: str) -> List[int]:
    """Check 0-based (or negative) indices against `n` and make them non-negative,
    dropping repeats."""
    if len(asked) == 0:
        raise ExplainError(f"No {what} chosen")
    chosen: List[int] = []
    for index in asked:
        if not -n <= index < n:
            raise ExplainError(
                f"{what} {index} is out of range: the encoder has {n} {what}s "
                f"(0 to {n - 1}, or -1 to -{n} from the end)"
            )
        if index % n not in chosen:
            chosen.append(index % n)
    return chosen


def _word_scores(
    nlp: Language,
    text: str,
    question: Optional[str],
    maps: AttentionMaps,
    scores: numpy.ndarray,
) -> List[WordAttention]:
    """Sum the [CLS] attention of each spaCy token's wordpieces (by character overlap)."""
    words: List[WordAttention] = []
    parts: List[Tuple[str, bool]] = [(question, True)] if question is not None else []
    parts.append((text, False))
    for part, is_question in parts:
        offsets = numpy.asarray(maps.offsets)
        rows = numpy.nonzero((maps.is_question == int(is_question)) & (offsets[:, 0] >= 0))[0]
        starts, ends = offsets[rows, 0], offsets[rows, 1]
        for token in nlp.make_doc(part):
            if token.is_space:
                continue
            begin, end = token.idx, token.idx + len(token)
            inside = rows[(starts < end) & (ends > begin)]
            score = float(scores[inside].sum()) if len(inside) else None
            words.append(WordAttention(token.text, begin, end, score, is_question))
    return words


# --- drawing -------------------------------------------------------------------


def _figure_class() -> Any:
    return figure_class("Drawing attention")


def _labels(result: ExplainResult) -> List[str]:
    # Question rows are marked, so the two segments of a pair read apart.
    return [
        f"{token} ·q" if flag else token
        for token, flag in zip(result.tokens, result.attention.is_question.tolist())
    ]


def _cell(n: int, largest: float = 0.32, total: float = 26.0) -> Tuple[float, float]:
    """Inches per wordpiece and a label font size: roomy for short texts, shrinking
    so a 512-wordpiece window stays a drawable picture."""
    cell = min(largest, total / max(n, 1))
    return cell, max(3.0, min(9.0, cell * 40))


def _heatmap(ax: Any, matrix: numpy.ndarray, labels: List[str], font: float, vmax: float) -> Any:
    n = len(labels)
    image = ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=vmax, interpolation="nearest")
    ax.set_xticks(range(n))
    ax.set_xticklabels(labels, rotation=90, fontsize=font)
    ax.set_yticks(range(n))
    ax.set_yticklabels(labels, fontsize=font)
    ax.tick_params(length=0)
    return image


def _layer_title(result: ExplainResult, layer: int) -> str:
    return f"Layer {layer} of 0-{result.attention.n_layers - 1}, {_head_words(result)}"


def _draw_layer(result: ExplainResult, layer: int, path: Path) -> Path:
    Figure = _figure_class()
    labels = _labels(result)
    n = len(labels)
    cell, font = _cell(n)
    side = n * cell
    fig = Figure(figsize=(side + 2.6, side + 2.2), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    matrix = result.head_mean(layer)
    image = _heatmap(ax, matrix, labels, font, float(matrix.max()))
    _mark_segments(ax, result)
    ax.set_xlabel("attended wordpiece (key)")
    ax.set_ylabel("attending wordpiece (query)")
    ax.set_title(f"{_layer_title(result, layer)}\n{result.encoder_component}: rows sum to 1")
    fig.colorbar(image, ax=ax, shrink=0.8, label="attention weight")
    fig.savefig(path)
    return path


def _draw_heads(result: ExplainResult, layer: int, path: Path) -> Path:
    Figure = _figure_class()
    labels = _labels(result)
    n = len(labels)
    heads = result.heads
    cols = min(4, len(heads))
    rows = -(-len(heads) // cols)
    cell, font = _cell(n, largest=0.24, total=14.0)
    side = n * cell
    # wordpiece labels on the outer panels only: the left column and the bottom row
    fig = Figure(figsize=(cols * (side + 0.3) + 2.8, rows * (side + 0.45) + 2.2), dpi=100)
    fig.set_layout_engine("constrained")
    axes = fig.subplots(rows, cols, squeeze=False, sharex=True, sharey=True)
    weights = result.attention.weights[layer]
    vmax = float(weights[heads].max())
    image = None
    for i, ax in enumerate(axes.flat):
        if i >= len(heads):
            ax.axis("off")
            continue
        image = _heatmap(ax, weights[heads[i]], labels, font, vmax)
        _mark_segments(ax, result)
        ax.set_title(f"head {heads[i]}", fontsize=11)
        ax.tick_params(labelleft=i % cols == 0, labelbottom=i + cols >= len(heads))
    fig.suptitle(
        f"Layer {layer} of 0-{result.attention.n_layers - 1}, head by head "
        "(rows: attending wordpiece; columns: attended wordpiece)",
        fontsize=13,
    )
    fig.colorbar(image, ax=axes, shrink=0.5, label="attention weight")
    fig.savefig(path)
    return path


def _draw_cls(result: ExplainResult, path: Path) -> Path:
    Figure = _figure_class()
    labels = _labels(result)
    n = len(labels)
    n_layers = result.attention.n_layers
    cell, font = _cell(n, largest=0.38, total=30.0)
    bar_height, strip_height = 1.7, 0.26 * n_layers
    height = bar_height * len(result.layers) + strip_height + 1.9
    fig = Figure(figsize=(max(6.0, n * cell + 2.0), height), dpi=110, layout="constrained")
    grid = fig.add_gridspec(
        len(result.layers) + 1, 1, height_ratios=[bar_height] * len(result.layers) + [strip_height]
    )
    special = result.attention.offsets[:, 0] < 0
    colors = numpy.where(special, "#9e9e9e", "#2a788e")
    # [CLS] often attends mostly to itself or [SEP] (up to 0.99 in middle layers):
    # the scales follow the text's wordpieces, and a taller special bar is cut and
    # labelled with its value.
    text_max = float(result.cls_attention[:, ~special].max())
    strip_ax = fig.add_subplot(grid[-1])
    for i, layer in enumerate(result.layers):
        ax = fig.add_subplot(grid[i], sharex=strip_ax)
        values = result.cls_attention[layer]
        top = float(values[~special].max()) * 1.25
        ax.bar(range(n), numpy.minimum(values, top), color=colors.tolist(), width=0.8)
        for j in numpy.nonzero(values > top)[0]:
            ax.text(
                j, top * 0.97, f"{values[j]:.2f}", ha="center", va="top", fontsize=7, rotation=90
            )
        ax.set_ylabel(f"layer {layer}", fontsize=9)
        ax.set_ylim(0, top)
        ax.tick_params(axis="x", labelbottom=False, length=0)
        ax.spines[["top", "right"]].set_visible(False)
        if i == 0:
            ax.set_title(
                "Attention from [CLS] to each wordpiece, "
                f"{_head_words(result)} (grey: special tokens, cut bars show their value)"
            )
    image = strip_ax.imshow(
        result.cls_attention,
        aspect="auto",
        cmap="viridis",
        vmin=0.0,
        vmax=text_max,
        interpolation="nearest",
    )
    strip_ax.set_yticks(range(n_layers))
    strip_ax.set_yticklabels([f"layer {i}" for i in range(n_layers)], fontsize=7)
    strip_ax.set_xticks(range(n))
    strip_ax.set_xticklabels(labels, rotation=90, fontsize=font)
    strip_ax.tick_params(length=0)
    _mark_segments(strip_ax, result, rows=False)
    extend = "max" if float(result.cls_attention.max()) > text_max else "neither"
    fig.colorbar(image, ax=strip_ax, label="weight", aspect=8, pad=0.01, extend=extend)
    fig.savefig(path)
    return path


def _mark_segments(ax: Any, result: ExplainResult, rows: bool = True) -> None:
    """White lines between the question and the context of a pair."""
    flags = result.attention.is_question
    if not flags.any():
        return
    boundary = int(numpy.nonzero(flags)[0][-1]) + 1.5  # after the question's [SEP]
    ax.axvline(boundary, color="white", linewidth=1.2)
    if rows:
        ax.axhline(boundary, color="white", linewidth=1.2)


def _head_words(result: ExplainResult) -> str:
    n_heads = result.attention.n_heads
    if len(result.heads) == 1:
        return f"head {result.heads[0]}"
    if len(result.heads) == n_heads:
        return f"mean of all {n_heads} heads"
    return "mean of heads " + ", ".join(map(str, result.heads))


def render(result: ExplainResult, output_dir: Path, source: str = "") -> List[Path]:
    """Write the PNGs and the HTML page of a result into `output_dir`.

    result (ExplainResult): What `explain` computed.
    output_dir (Path): The folder (created if missing).
    source (str): The encoder's checkpoint, named on the page.
    RETURNS (List[Path]): The files written; also set on `result`.
    """
    _figure_class()  # fail before anything is written when matplotlib is missing
    output_dir.mkdir(parents=True, exist_ok=True)
    files: List[Path] = []
    for layer in result.layers:
        files.append(_draw_layer(result, layer, output_dir / f"attention_layer{layer}.png"))
        if len(result.heads) > 1:
            files.append(
                _draw_heads(result, layer, output_dir / f"attention_layer{layer}_heads.png")
            )
    files.append(_draw_cls(result, output_dir / "cls_attention.png"))
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
{main}, {html.escape(_head_words(result))}; hover over a word for the value. The special
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
