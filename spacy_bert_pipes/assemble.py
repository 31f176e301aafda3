"""`assemble`: one pipeline from components trained in separate pipelines.

Each component is copied with spaCy's `source` mechanism, weights and config
included, into a new pipeline that shares one vocab. A component fine-tuned
with its own encoder keeps that encoder: the assembled pipeline runs one
encoder pass per component, exactly as the sources did. Components trained
with different fine-tuned encoders cannot share one encoder pass without
training again: for one pass, train the heads together, listening to one
`bert_encoder` (`@architectures = "spacy-bert-pipes.EncoderListener.v1"`).

A head that listens to a `bert_encoder` in its source pipeline is given a copy
of that encoder as its own (spaCy's `replace_listeners`), so it runs alone.
A component whose encoder reads each sentence apart (`context = "sentence"`,
as `configs/ner.cfg` trains on CoNLL's sentences) needs sentence boundaries,
which no copied component sets: a rule-based `sentencizer` is added first
(unless `sentencizer=False`), so that paragraphs are read as in training.
With `vectors=ENCODER`, a `bert_encoder` loaded from ENCODER (not fine-tuned:
a sentence-embedding checkpoint such as the default all-MiniLM-L6-v2) and a
`bert_vectors` component are added last, so that the pipeline's `doc.vector`
and `similarity` are the checkpoint's sentence embeddings (one more encoder
pass; see docs/vectors.md). `assemble.json`, written beside the pipeline, says
where each component came from.
"""

import json
import shutil
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple, Union

import spacy
from spacy.language import Language
from spacy.training import Example
from spacy.vocab import Vocab
from thinc.api import Model

from .int8_check import unmark_pipeline
from .loading import PipelineLoadError, load_pipeline
from .models.encoder.listener import EncoderListener
from .pipeline.encoder import BertEncoderPipe

Kind = Literal["textcat", "ner", "qa"]
# The factories that make a component of each kind.
KIND_FACTORIES: Dict[str, Tuple[str, ...]] = {
    "textcat": ("bert_textcat",),
    "ner": ("bert_ner",),
    "qa": ("bert_qa",),
}
# What each kind writes on a Doc: two components writing the same place clash.
KIND_WRITES = {"textcat": "doc.cats", "ner": "doc.ents", "qa": "doc._.answers"}
# The path of a head's encoder in its config, for `replace_listeners`.
ENCODER_PATH = "model.encoder"
MANIFEST = "assemble.json"


class AssembleError(ValueError):
    """The sources cannot be put into one pipeline."""


@dataclass
class SourcedComponent:
    """Where a component of the assembled pipeline came from.

    name (str): Its name in the assembled pipeline.
    factory (str): Its factory, e.g. "bert_textcat".
    source (str): The source pipeline, as given.
    source_component (str): Its name in the source pipeline.
    encoder (str): "own" (it was trained with its own encoder), or which
        bert_encoder of the source it listened to (now copied into it).
    labels (List[str]): Its labels (the question keys of a bert_qa).
    """

    name: str
    factory: str
    source: str
    source_component: str
    encoder: str
    labels: List[str] = field(default_factory=list)


@dataclass
class Assembled:
    """The assembled pipeline and what went into it.

    nlp (Language): The pipeline.
    components (List[SourcedComponent]): Its components, in pipeline order.
    notes (List[str]): What to keep in mind (renamed components, clashes).
    vectors (Optional[Dict[str, Any]]): The components added for doc vectors
        (encoder, vectors, source, pooling), or None.
    """

    nlp: Language
    components: List[SourcedComponent]
    notes: List[str] = field(default_factory=list)
    vectors: Optional[Dict[str, Any]] = None

    def manifest(self) -> Dict[str, Any]:
        """The contents of assemble.json."""
        return {
            "pipeline": self.nlp.pipe_names,
            "components": [asdict(c) for c in self.components],
            "encoder_passes": len(self.components) + (self.vectors is not None),
            "vectors": self.vectors,
            "note": (
                "Each component runs its own fine-tuned encoder: one encoder pass per "
                "component. One shared pass needs the heads trained together on one "
                "bert_encoder (EncoderListener.v1)."
            ),
            "notes": self.notes,
        }


def assemble(
    sources: Sequence[Tuple[str, Union[str, Path]]],
    *,
    sentencizer: bool = True,
    vectors: Optional[str] = None,
) -> Assembled:
    """Copy the trained components of several pipelines into one.

    sources (Sequence[Tuple[str, Union[str, Path]]]): (kind, pipeline) pairs in the
        order the components should run, kind being "textcat", "ner" or "qa": every
        component of that kind in the pipeline (a folder or package) is copied.
    sentencizer (bool): Add spaCy's rule-based sentencizer first when a component
        encodes each sentence apart (encoder `context = "sentence"`).
    vectors (Optional[str]): A checkpoint (folder or installed package) whose
        sentence embeddings become `doc.vector`: a `bert_encoder` loaded from it
        and a `bert_vectors` are added last. None: no doc vectors.
    RETURNS (Assembled): The pipeline, and where each component came from.
    """
    if not sources:
        raise AssembleError("Nothing to assemble: give at least one source pipeline")
    for kind, path in sources:
        if kind not in KIND_FACTORIES:
            raise AssembleError(
                f"{path}: unknown kind {kind!r} (one of {', '.join(KIND_FACTORIES)})"
            )
    # The first source's vocab becomes the pipeline's; the others are loaded into it.
    first = _load(str(sources[0][1]))
    loaded = {str(sources[0][1]): first}
    nlp = spacy.blank(
        str(first.lang), vocab=first.vocab, config={"nlp": {"batch_size": first.batch_size}}
    )
    nlp.meta["name"] = "assembled"
    nlp.meta["description"] = "Components assembled from separately trained pipelines"
    # As spaCy's from_config does for sourced components: load each source into the
    # pipeline's vocab (its strings are added), then restore the vocab's other state,
    # which loading replaces.
    vocab_state = nlp.vocab.to_bytes(exclude=["lookups", "strings"])
    tokenizer_state = _tokenizer_bytes(nlp)
    components: List[SourcedComponent] = []
    notes: List[str] = []
    writers: Dict[str, str] = {}
    for kind, path in sources:
        if str(path) not in loaded:
            loaded[str(path)] = _load(str(path), vocab=nlp.vocab)
        source = loaded[str(path)]
        if source.lang != nlp.lang:
            raise AssembleError(
                f"{path}: its language is '{source.lang}', the first source's '{nlp.lang}'"
            )
        if _tokenizer_bytes(source) != tokenizer_state:
            raise AssembleError(
                f"{path}: its tokenizer differs from spaCy's default '{nlp.lang}' "
                "tokenizer, which the assembled pipeline uses"
            )
        if source.vocab.vectors.shape[0]:
            raise AssembleError(
                f"{path}: it has static word vectors; assemble copies BERT components, "
                "which do not use them"
            )
        names = [
            name
            for name in source.pipe_names
            if source.get_pipe_meta(name).factory in KIND_FACTORIES[kind]
        ]
        if not names:
            found = ", ".join(
                f"{name} ({source.get_pipe_meta(name).factory})" for name in source.pipe_names
            )
            raise AssembleError(
                f"{path}: no {' or '.join(KIND_FACTORIES[kind])} component for --{kind} "
                f"(its components: {found or 'none'})"
            )
        for source_name in names:
            encoder = _own_encoder(source, source_name, path)
            name = _free_name(nlp, source_name)
            if name != source_name:
                notes.append(f"'{source_name}' of {path} is named '{name}' (the name was taken)")
            # Text classifiers add to doc.cats and bert_qa components to
            # doc._.answers; a second NER replaces doc.ents.
            if KIND_WRITES[kind] in writers and kind == "ner":
                notes.append(
                    f"'{name}' writes {KIND_WRITES[kind]}, as '{writers[KIND_WRITES[kind]]}' "
                    "before it does: the later component's annotation replaces the earlier's"
                )
            writers.setdefault(KIND_WRITES[kind], name)
            with warnings.catch_warnings():
                # W113 (different vectors): all sources are loaded into one vocab.
                warnings.filterwarnings("ignore", message=r"\[W113\]")
                pipe = nlp.add_pipe(source_name, name=name, source=source)
            labels = list(getattr(pipe, "labels", ()))
            components.append(
                SourcedComponent(
                    name=name,
                    factory=nlp.get_pipe_meta(name).factory,
                    source=str(path),
                    source_component=source_name,
                    encoder=encoder,
                    labels=labels,
                )
            )
    textcat_labels = [
        label for c in components if c.factory == "bert_textcat" for label in c.labels
    ]
    if len(textcat_labels) != len(set(textcat_labels)):
        repeated = sorted({label for label in textcat_labels if textcat_labels.count(label) > 1})
        notes.append(
            "Text classifiers share the labels "
            + ", ".join(repeated[:10])
            + (" ..." if len(repeated) > 10 else "")
            + ": doc.cats holds the later one's score"
        )
    nlp.vocab.from_bytes(vocab_state, exclude=["lookups", "strings"])
    by_sentence = [c.name for c in components if _encoder_context(nlp, c.name) == "sentence"]
    if by_sentence and sentencizer:
        nlp.add_pipe("sentencizer", first=True)
        notes.append(
            f"{', '.join(repr(n) for n in by_sentence)} encodes each sentence apart "
            "(context 'sentence'): a rule-based sentencizer runs first to find them"
        )
    elif by_sentence:
        notes.append(
            f"{', '.join(repr(n) for n in by_sentence)} encodes each sentence apart "
            "(context 'sentence'), but nothing sets sentence boundaries: each doc is "
            "read as one sentence"
        )
    added = _add_vectors(nlp, vectors) if vectors is not None else None
    return Assembled(nlp, components, notes, added)


def _add_vectors(nlp: Language, source: str) -> Dict[str, Any]:
    """Add a `bert_encoder` loaded from `source` and a `bert_vectors` reading it,
    last; the encoder reads up to the checkpoint's `max_seq_length` wordpieces
    in one window, as sentence-transformers does."""
    from .models.encoder.loaders import HFCheckpoint, resolve_source
    from .models.encoder.pooling import read_pooling

    encoder_name = _free_name(nlp, "vectors_encoder")
    vectors_name = _free_name(nlp, "bert_vectors")
    try:
        recipe = read_pooling(resolve_source(source))
        model: Dict[str, Any] = {}
        if recipe.max_seq_length:
            model["max_length"] = recipe.max_seq_length
        encoder: Any = nlp.add_pipe("bert_encoder", name=encoder_name, config={"model": model})
        # the encoder learns nothing from examples; spaCy wants a non-empty sample
        sample = [Example(nlp.make_doc("text"), nlp.make_doc("text"))]
        encoder.initialize(lambda: sample, nlp=nlp, encoder_loader=HFCheckpoint(source))
        vectors: Any = nlp.add_pipe("bert_vectors", name=vectors_name)
        vectors.initialize(nlp=nlp, checkpoint=source)
    except (OSError, ValueError) as err:  # no such checkpoint, or one that cannot be read
        raise AssembleError(f"vectors {source}: {err}") from err
    return {
        "encoder": encoder_name,
        "vectors": vectors_name,
        "source": source,
        "pooling": recipe.to_dict(),
    }


def save_assembled(assembled: Assembled, output: Union[str, Path]) -> Path:
    """Save the pipeline to a folder, with assemble.json.

    A folder holding an earlier assembly (it has assemble.json) is replaced; any
    other folder that is not empty is an error.

    assembled (Assembled): What `assemble` returned.
    output (Union[str, Path]): The folder.
    RETURNS (Path): The manifest's path.
    """
    output = Path(output)
    if output.exists():
        if (output / MANIFEST).is_file():
            shutil.rmtree(output)
        elif not output.is_dir() or any(output.iterdir()):
            raise AssembleError(
                f"{output}: exists and is not an earlier assembly (it has no {MANIFEST}); "
                "choose another folder"
            )
    assembled.nlp.to_disk(output)
    unmark_pipeline(output)  # an int8 check of a part does not hold for the whole
    manifest = output / MANIFEST
    manifest.write_text(json.dumps(assembled.manifest(), indent=2) + "\n", encoding="utf8")
    return manifest


def _encoder_context(nlp: Language, name: str) -> Optional[str]:
    """The `context` setting of a component's own BertEncoder, if it has one."""
    model = getattr(nlp.get_pipe(name), "model", None)
    if not isinstance(model, Model) or not model.has_ref("encoder"):
        return None
    context = model.get_ref("encoder").attrs.get("context")
    return context if isinstance(context, str) else None


def _load(path: str, vocab: Optional[Vocab] = None) -> Language:
    """A source pipeline, checked as `load_pipeline` checks it: a missing, foreign
    or damaged one is an AssembleError of one line naming the folder and file."""
    try:
        if vocab is None:
            return load_pipeline(path)
        return load_pipeline(path, vocab=vocab, exclude=["lookups"])
    except PipelineLoadError as err:
        raise AssembleError(str(err)) from err


def _tokenizer_bytes(nlp: Language) -> bytes:
    tokenizer: Any = nlp.tokenizer  # typed as a Callable; spaCy's Tokenizer serializes
    return tokenizer.to_bytes(exclude=["vocab"])


def _free_name(nlp: Language, name: str) -> str:
    if name not in nlp.component_names:
        return name
    n = 2
    while f"{name}_{n}" in nlp.component_names:
        n += 1
    return f"{name}_{n}"


def _own_encoder(source: Language, name: str, path: Union[str, Path]) -> str:
    """Give a head that listens to a bert_encoder a copy of it; say which encoder it runs."""
    model = getattr(source.get_pipe(name), "model", None)
    if not isinstance(model, Model) or not model.has_ref("encoder"):
        return "own"
    if not isinstance(model.get_ref("encoder"), EncoderListener):
        if model.get_ref("encoder").name != "bert_encoder":
            raise AssembleError(
                f"{path}: '{name}' reads the output of another component's transformer "
                f"({model.get_ref('encoder').name}); assemble copies components with "
                "their own BERT encoder or listening to a bert_encoder"
            )
        return "own"
    source._link_components()
    for upstream, pipe in source.pipeline:
        if isinstance(pipe, BertEncoderPipe) and name in pipe.listening_components:
            try:
                source.replace_listeners(upstream, name, [ENCODER_PATH])
            except ValueError as err:
                raise AssembleError(
                    f"{path}: cannot give '{name}' its own copy of '{upstream}': {err}"
                ) from err
            return f"copy of '{upstream}', which it listened to"
    raise AssembleError(f"{path}: '{name}' listens to a bert_encoder the pipeline does not have")
