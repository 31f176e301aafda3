"""`bert_vectors`: `doc.vector`, `span.vector`, `token.vector` and `similarity`
from the upstream `bert_encoder`'s contextual vectors.

The component runs no model: it pools the `doc._.bert_encoding` that a
`bert_encoder` earlier in the pipeline wrote (the same pass that feeds the
listening heads) and installs spaCy's user hooks on the Doc:

* `doc.vector`: the checkpoint's sentence embedding, pooled by its own recipe
  (`models/encoder/pooling.py`: for all-MiniLM-L6-v2 the mean over [CLS], wordpieces and
  [SEP], normalised), as `SentenceTransformer.encode` computes it;
* `span.vector`: the same recipe over the span's wordpieces (a span has no [CLS]:
  "cls" pooling uses their mean); a span of the whole doc is the doc vector;
* `token.vector`: the mean of the token's wordpieces (zeros for a token without
  any, e.g. whitespace, and `has_vector` False);
* `similarity`: cosine of the vectors, for docs, spans and tokens.

The hooks are methods of a small picklable object, so `pickle.dumps(doc)` keeps
them. spaCy's `Doc.to_bytes`, which `nlp.pipe(n_process>1)` and DocBin use,
drops user hooks (its warning W109): call the component again on such a doc
(`nlp.get_pipe("bert_vectors")(doc)`) to re-install them; it pools the
encoding the doc carries and runs no encoder.
"""

from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Literal, Optional, Union

import numpy
import srsly
from spacy.language import Language
from spacy.tokens import Doc, Span, Token
from spacy.util import ensure_path
from thinc.api import to_numpy
from thinc.types import Floats1d

from ..models.encoder.bert import hf_shim
from ..models.encoder.listener import ENCODING_ATTR
from ..models.encoder.loaders import resolve_source
from ..models.encoder.pooling import Pooling, pool, pool_doc, read_pooling
from ..models.text.align import align_tokens
from ..models.types import DocEncoding
from .common import ensure_encoding_extension
from .encoder import BertEncoderPipe

PoolingMode = Literal["cls", "max", "mean", "mean_sqrt_len"]

# doc.user_data keys: the pooled doc vector, and the token vectors with the
# wordpiece range of each token (computed on first use).
DOC_VECTOR_KEY = "spacy_bert_pipes.doc_vector"
TOKENS_KEY = "spacy_bert_pipes.token_vectors"


@Language.factory(
    "bert_vectors",
    requires=[f"doc._.{ENCODING_ATTR}"],
    assigns=["doc.user_hooks", "doc.user_span_hooks", "doc.user_token_hooks"],
    default_config={"pooling": None, "normalize": None, "own_layers": 0},
)
def make_bert_vectors(
    nlp: Language,
    name: str,
    pooling: Optional[List[PoolingMode]],
    normalize: Optional[bool],
    own_layers: int,
) -> "BertVectors":
    """Contextual `doc.vector` / `span.vector` / `token.vector` / `similarity` from
    the upstream `bert_encoder`'s output.

    pooling (Optional[List[str]]): Pooling modes ("cls", "max", "mean",
        "mean_sqrt_len"; several are concatenated). null: read the recipe from the
        encoder's checkpoint in `initialize` (sentence-transformers layout; mean
        when it says nothing).
    normalize (Optional[bool]): Scale doc and span vectors to unit length. null:
        as the checkpoint says (false when it says nothing).
    own_layers (int): Take the vectors from this component's own copy of the
        encoder's top n layers, made in `initialize` from the checkpoint's weights,
        over the shared layers below them (`models/transformer/branches.py`). No loss trains
        the copy, so when heads fine-tune a shared encoder the vectors keep the
        checkpoint's top layers. 0: the shared encoder's output.
    """
    if own_layers < 0:
        raise ValueError(f"[components.{name}] own_layers must be >= 0: {own_layers}")
    return BertVectors(nlp.vocab, name, pooling=pooling, normalize=normalize, own_layers=own_layers)


class BertVectors:
    """Installs contextual vector hooks on Docs (see `make_bert_vectors`)."""

    def __init__(
        self,
        vocab: Any,
        name: str = "bert_vectors",
        *,
        pooling: Optional[List[PoolingMode]] = None,
        normalize: Optional[bool] = None,
        own_layers: int = 0,
    ) -> None:
        ensure_encoding_extension()
        self.vocab = vocab
        self.name = name
        # the settings as configured; None: from the checkpoint in initialize
        self.cfg: Dict[str, Any] = {"pooling": pooling, "normalize": normalize, "recipe": None}
        self.own_layers = own_layers
        self._hooks: Optional[VectorHooks] = None
        if pooling is not None and normalize is not None:
            self._set_recipe(Pooling(tuple(pooling), normalize))

    @property
    def recipe(self) -> Pooling:
        """The pooling recipe in use."""
        if self.cfg["recipe"] is None:
            raise ValueError(
                f"[{self.name}] has no pooling recipe yet: run nlp.initialize() or "
                f"nlp.get_pipe({self.name!r}).initialize(nlp=nlp), or set both 'pooling' and "
                "'normalize' in its config"
            )
        return Pooling.from_dict(self.cfg["recipe"])

    @property
    def branch(self) -> str:
        """The name of the encoder branch the vectors come from ("": the shared output)."""
        return self.name if self.own_layers else ""

    def _set_recipe(self, recipe: Pooling) -> None:
        self.cfg["recipe"] = recipe.to_dict()
        self._hooks = VectorHooks(recipe, self.branch)

    def initialize(
        self,
        get_examples: Optional[Callable[[], Iterable[Any]]] = None,
        *,
        nlp: Optional[Language] = None,
        checkpoint: Optional[str] = None,
    ) -> None:
        """Read the pooling recipe from the encoder's checkpoint.

        checkpoint (Optional[str]): A checkpoint folder or installed model package;
            default: the source of the pipeline's `bert_encoder`. Set it under
            [initialize.components.<name>].
        """
        recipe = Pooling()
        if self.cfg["pooling"] is None or self.cfg["normalize"] is None:
            source = checkpoint or self._upstream_source(nlp)
            recipe = read_pooling(resolve_source(source))
        self._set_recipe(self._configured(recipe))
        if self.own_layers:
            # the upstream encoder was initialized first: its top layers are still
            # the checkpoint's, and no loss reaches this copy of them
            shim = hf_shim(self._upstream(nlp).model)
            shim.add_branch(self.name, self.own_layers, frozen=True)

    def _configured(self, recipe: Pooling) -> Pooling:
        """The recipe with the configured pooling and normalize (where set) on top."""
        pooling, normalize = self.cfg["pooling"], self.cfg["normalize"]
        if pooling is not None:
            recipe = Pooling(tuple(pooling), recipe.normalize, recipe.source, recipe.max_seq_length)
        if normalize is not None:
            recipe = Pooling(recipe.modes, normalize, recipe.source, recipe.max_seq_length)
        return recipe

    def _upstream(self, nlp: Optional[Language]) -> BertEncoderPipe:
        """The bert_encoder whose doc._.bert_encoding this component reads: the
        last one before it."""
        if nlp is None:
            raise ValueError(f"[{self.name}] initialize needs `nlp` (to find its bert_encoder)")
        names = nlp.pipe_names
        before = names[: names.index(self.name)] if self.name in names else names
        for name in reversed(before):
            pipe = nlp.get_pipe(name)
            if isinstance(pipe, BertEncoderPipe):
                return pipe
        raise ValueError(
            f"[{self.name}] has own_layers, but no bert_encoder comes before it in the pipeline"
        )

    def _upstream_source(self, nlp: Optional[Language]) -> str:
        if nlp is None:
            raise ValueError(
                f"[{self.name}] initialize needs `nlp` (to find the bert_encoder's checkpoint) "
                "or a `checkpoint`"
            )
        # the doc._.bert_encoding this component reads is the last one written before it
        names = nlp.pipe_names
        before = names[: names.index(self.name)] if self.name in names else names
        for name in reversed(before):
            pipe = nlp.get_pipe(name)
            if isinstance(pipe, BertEncoderPipe):
                source = str(pipe.model.attrs.get("source", ""))
                if source:
                    return source
        raise ValueError(
            f"[{self.name}] found no bert_encoder with a known checkpoint before it in the "
            "pipeline: add one before this component, or set [initialize.components."
            f"{self.name}] checkpoint"
        )

    def __call__(self, doc: Doc) -> Doc:
        encoding = doc._.get(ENCODING_ATTR)
        if encoding is None:
            raise ValueError(
                f"[{self.name}] doc has no doc._.{ENCODING_ATTR}: a bert_encoder component "
                f"must run before {self.name} (doc starts {doc.text[:40]!r})"
            )
        if self._hooks is None:
            self._hooks = VectorHooks(self.recipe, self.branch)  # a clear error without a recipe
        encoding = _branch(encoding, self.branch, doc)
        doc.user_data[DOC_VECTOR_KEY] = to_numpy(pool_doc(encoding, self._hooks.recipe))
        doc.user_data.pop(TOKENS_KEY, None)
        self._hooks.install(doc)
        return doc

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        for doc in stream:
            yield self(doc)

    # --- serialization: the recipe travels in cfg --------------------------
    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        return srsly.json_dumps(self.cfg).encode("utf8")

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "BertVectors":
        self._load_cfg(srsly.json_loads(bytes_data))
        return self

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        srsly.write_json(folder / "cfg", self.cfg)

    def from_disk(
        self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()
    ) -> "BertVectors":
        self._load_cfg(srsly.read_json(ensure_path(path) / "cfg"))
        return self

    def _load_cfg(self, cfg: Dict[str, Any]) -> None:
        """The saved recipe (read from the checkpoint in `initialize`), with the
        configured pooling and normalize on top: settings come from the config,
        also when they were given at `spacy.load`."""
        saved = cfg.get("recipe")
        if saved is None:
            return
        self._set_recipe(self._configured(Pooling.from_dict(saved)))


class VectorHooks:
    """spaCy user hooks reading a doc's encoding; picklable (plain data inside)."""

    def __init__(self, recipe: Pooling, branch: str = "") -> None:
        self.recipe = recipe
        self.branch = branch  # the encoder branch the vectors come from ("": shared)

    def install(self, doc: Doc) -> None:
        doc.user_hooks.update(
            vector=self.doc_vector,
            has_vector=self.doc_has_vector,
            vector_norm=self.vector_norm,
            similarity=self.similarity,
        )
        doc.user_span_hooks.update(
            vector=self.span_vector,
            has_vector=self.span_has_vector,
            vector_norm=self.vector_norm,
            similarity=self.similarity,
        )
        doc.user_token_hooks.update(
            vector=self.token_vector,
            has_vector=self.token_has_vector,
            vector_norm=self.vector_norm,
            similarity=self.similarity,
        )

    # --- docs -----------------------------------------------------------------
    def doc_vector(self, doc: Doc) -> Floats1d:
        vector = doc.user_data.get(DOC_VECTOR_KEY)
        if vector is None:
            vector = to_numpy(pool_doc(_encoding(doc, self.branch), self.recipe))
            doc.user_data[DOC_VECTOR_KEY] = vector
        return vector

    def doc_has_vector(self, doc: Doc) -> bool:
        return DOC_VECTOR_KEY in doc.user_data or doc._.get(ENCODING_ATTR) is not None

    # --- spans ----------------------------------------------------------------
    def span_vector(self, span: Span) -> Floats1d:
        doc = span.doc
        if span.start == 0 and span.end == len(doc):
            return self.doc_vector(doc)
        first, end = _piece_range(doc, span.start, span.end, self.branch)
        pieces = to_numpy(_encoding(doc, self.branch).wordpieces[first:end])
        return pool(pieces, self.recipe)

    def span_has_vector(self, span: Span) -> bool:
        first, end = _piece_range(span.doc, span.start, span.end, self.branch)
        return end > first

    # --- tokens ---------------------------------------------------------------
    def token_vector(self, token: Token) -> Floats1d:
        return _token_table(token.doc, self.branch)["vectors"][token.i]

    def token_has_vector(self, token: Token) -> bool:
        return bool(_token_table(token.doc, self.branch)["lengths"][token.i] > 0)

    # --- all ------------------------------------------------------------------
    def vector_norm(self, obj: Union[Doc, Span, Token]) -> float:
        vector: Any = obj.vector
        return float(numpy.linalg.norm(vector))

    def similarity(self, obj: Union[Doc, Span, Token], other: Any) -> float:
        """Cosine similarity of the two objects' vectors (0.0 if either is zero)."""
        a: Any = obj.vector
        b: Any = other.vector
        if a.shape != b.shape:
            raise ValueError(
                f"Cannot compare vectors of widths {a.shape} and {b.shape} (a {type(obj).__name__} "
                f"and a {type(other).__name__})"
            )
        denominator = float(numpy.linalg.norm(a) * numpy.linalg.norm(b))
        return float(numpy.dot(a, b) / denominator) if denominator else 0.0


def _encoding(doc: Doc, branch: str = "") -> DocEncoding:
    encoding = doc._.get(ENCODING_ATTR)
    if encoding is None:
        raise ValueError(
            f"The doc has no doc._.{ENCODING_ATTR} to take vectors from (doc starts "
            f"{doc.text[:40]!r}): was it saved without its user data?"
        )
    return _branch(encoding, branch, doc)


def _branch(encoding: DocEncoding, branch: str, doc: Doc) -> DocEncoding:
    """The encoding, or the vectors component's own branch of it (`own_layers`)."""
    if not branch:
        return encoding
    if branch not in encoding.branches:
        raise ValueError(
            f"[{branch}] takes its vectors from its own top encoder layers (own_layers), "
            f"but the doc's encoding has none (doc starts {doc.text[:40]!r}): "
            "initialize the pipeline again, or set own_layers = 0"
        )
    return encoding.branches[branch]


def _token_table(doc: Doc, branch: str = "") -> Dict[str, Any]:
    """Each token's vector (mean of its wordpieces) and wordpiece range, computed
    once per doc and kept in `doc.user_data`."""
    table = doc.user_data.get(TOKENS_KEY)
    if table is None:
        encoding = _encoding(doc, branch)
        alignment = align_tokens(doc, encoding.offsets)
        starts = numpy.asarray(alignment.starts, dtype="i")
        lengths = numpy.asarray(alignment.lengths, dtype="i")
        pieces: Any = to_numpy(encoding.wordpieces)
        # sums over ragged runs by cumulative sums (a piece may be shared by tokens)
        totals = numpy.zeros((pieces.shape[0] + 1, pieces.shape[1]), dtype="float64")
        numpy.cumsum(pieces, axis=0, out=totals[1:])
        sums = totals[starts + lengths] - totals[starts]
        vectors = (sums / numpy.maximum(lengths, 1)[:, None]).astype("f")
        table = {"vectors": vectors, "starts": starts, "lengths": lengths}
        doc.user_data[TOKENS_KEY] = table
    return table


def _piece_range(doc: Doc, start: int, end: int, branch: str = "") -> "tuple[int, int]":
    """The wordpieces [first, end) of tokens start..end-1 (empty: first == end)."""
    table = _token_table(doc, branch)
    starts = table["starts"][start:end]
    lengths = table["lengths"][start:end]
    has = lengths > 0
    if not has.any():
        return 0, 0
    return int(starts[has].min()), int((starts + lengths)[has].max())
