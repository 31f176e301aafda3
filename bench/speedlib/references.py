"""The systems bench/speed.py compares ours with: spacy-transformers
(`trf-textcat-ner`) and Hugging Face pipelines (`hf-*`), on the same weights."""

import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

from speedlib.systems import (
    BIO_TAGS,
    NER_LABELS,
    QA_DOC_STRIDE,
    QA_MAX_SEQ_LEN,
    QUESTIONS,
    Runner,
)
from speedlib.workloads import Settings, count_words, encoder_folder, intent_labels


def trf_window(s: Settings, texts: List[str]) -> Dict[str, Any]:
    """spacy-transformers windows are spans of spaCy tokens: size them so that they
    hold about max_length - 2 wordpieces and step like ours, using this sample's
    wordpieces per token (its `stride` is the step between window starts; ours is
    the overlap)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(encoder_folder(), local_files_only=True)
    n_pieces = sum(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])
    n_tokens = count_words(texts)
    ratio = n_pieces / max(n_tokens, 1)
    window = max(1, int((s.max_length - 2) / ratio))
    step = max(1, min(window, int((s.max_length - 2 - s.stride) / ratio)))
    return {"wordpieces_per_token": round(ratio, 3), "window": window, "stride": step}


def build_trf(s: Settings, texts: List[str]) -> Tuple[Runner, Dict[str, Any]]:
    import spacy
    from spacy.training import Example

    spacy.util.fix_random_seed(0)
    spans = trf_window(s, texts)
    listener = {
        "@architectures": "spacy-transformers.TransformerListener.v1",
        "grad_factor": 1.0,
        "pooling": {"@layers": "reduce_mean.v1"},
        "upstream": "*",
    }
    nlp = spacy.blank("en")
    transformer = {
        "@architectures": "spacy-transformers.TransformerModel.v3",
        "name": encoder_folder(),
        "get_spans": {
            "@span_getters": "spacy-transformers.strided_spans.v1",
            "window": spans["window"],
            "stride": spans["stride"],
        },
        "tokenizer_config": {"use_fast": True},
        "transformer_config": {},
        "mixed_precision": False,
    }
    nlp.add_pipe(
        "transformer", config={"model": transformer, "max_batch_items": s.max_batch_tokens}
    )
    textcat_model = {
        "@architectures": "spacy.TextCatReduce.v1",
        "exclusive_classes": True,
        "use_reduce_first": False,
        "use_reduce_last": False,
        "use_reduce_max": False,
        "use_reduce_mean": True,
        "nO": None,
        "tok2vec": listener,
    }
    textcat: Any = nlp.add_pipe("textcat", config={"model": textcat_model})
    ner_model = {
        "@architectures": "spacy.TransitionBasedParser.v2",
        "state_type": "ner",
        "extra_state_tokens": False,
        "hidden_width": 64,
        "maxout_pieces": 2,
        "use_upper": False,
        "nO": None,
        "tok2vec": listener,
    }
    ner: Any = nlp.add_pipe("ner", config={"model": ner_model})
    labels = intent_labels(Path(s.data))
    for label in labels:
        textcat.add_label(label)
    for label in NER_LABELS:
        ner.add_label(label)
    doc = nlp.make_doc("John Smith lost his card in Paris")
    example = Example.from_dict(
        doc,
        {
            "cats": {label: float(label == labels[0]) for label in labels},
            "entities": [(0, 10, "PER"), (28, 33, "LOC")],
        },
    )
    nlp.initialize(lambda: [example])

    def run(texts: List[str]) -> Dict[str, Any]:
        checks = {"docs": 0, "docs_with_cats": 0, "entities": 0, "windows": 0, "wordpieces": 0}
        longest = 0
        for doc in nlp.pipe(texts, batch_size=s.batch_size):
            checks["docs"] += 1
            checks["docs_with_cats"] += len(doc.cats) == len(labels)
            checks["entities"] += len(doc.ents)
            lengths = list(doc._.trf_data.wordpieces.lengths)  # specials included
            checks["windows"] += len(lengths)
            checks["wordpieces"] += sum(lengths)
            longest = max([longest, *lengths])
        ok = checks["docs"] == checks["docs_with_cats"] == len(texts)
        return {**checks, "longest_window": longest, "ok": ok}

    settings = {
        "pipeline": nlp.pipe_names,
        "precision": "fp32",
        "batch_size": s.batch_size,
        "max_batch_items": s.max_batch_tokens,
        "strided_spans": spans,
    }
    return run, settings


def build_hf(s: Settings, system: str) -> Tuple[Runner, Dict[str, Any]]:
    import transformers
    from transformers import (
        AutoModelForQuestionAnswering,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
        pipeline,
    )

    transformers.set_seed(0)
    transformers.logging.set_verbosity_error()  # "newly initialized heads" warnings
    folder = encoder_folder()
    kwargs: Dict[str, Any] = {"local_files_only": True, "use_safetensors": True}
    labels = intent_labels(Path(s.data))
    runs: List[Tuple[str, Callable[[List[str]], Dict[str, int]]]] = []
    if system in ("hf-textcat", "hf-textcat-ner"):
        model = AutoModelForSequenceClassification.from_pretrained(
            folder, id2label=dict(enumerate(labels)), **kwargs
        )
        tokenizer = AutoTokenizer.from_pretrained(
            folder, model_max_length=s.max_length, local_files_only=True
        )
        classify = pipeline("text-classification", model=model, tokenizer=tokenizer, device=s.gpu)

        def run_textcat(texts: List[str]) -> Dict[str, int]:
            out = classify(texts, batch_size=s.hf_batch_size, truncation=True)
            return {"docs_with_label": sum(1 for o in out if o.get("label") in labels)}

        runs.append(("textcat", run_textcat))
    if system in ("hf-ner", "hf-textcat-ner"):
        model = AutoModelForTokenClassification.from_pretrained(
            folder, id2label=dict(enumerate(BIO_TAGS)), **kwargs
        )
        tokenizer = AutoTokenizer.from_pretrained(
            folder, model_max_length=s.max_length, local_files_only=True
        )
        tag = pipeline(
            "token-classification",
            model=model,
            tokenizer=tokenizer,
            aggregation_strategy="first",
            stride=s.stride,
            device=s.gpu,
        )

        def run_ner(texts: List[str]) -> Dict[str, int]:
            out = tag(texts, batch_size=s.hf_batch_size)
            return {"docs_tagged": len(out), "entities": sum(len(ents) for ents in out)}

        runs.append(("ner", run_ner))
    if system == "hf-qa":
        model = AutoModelForQuestionAnswering.from_pretrained(folder, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        answer = pipeline("question-answering", model=model, tokenizer=tokenizer, device=s.gpu)
        qa_batch = max(1, s.max_batch_tokens // QA_MAX_SEQ_LEN)

        def run_qa(texts: List[str]) -> Dict[str, int]:
            pairs = [(q, t) for t in texts for q in QUESTIONS.values()]
            out = answer(
                question=[q for q, _ in pairs],
                context=[t for _, t in pairs],
                batch_size=qa_batch,
                max_seq_len=QA_MAX_SEQ_LEN,
                doc_stride=QA_DOC_STRIDE,
                max_answer_len=15,
            )
            out = [out] if isinstance(out, dict) else out
            return {"answers": sum(1 for o in out if "answer" in o)}

        runs.append(("qa", run_qa))

    def run(texts: List[str]) -> Dict[str, Any]:
        checks: Dict[str, Any] = {"seconds_per_part": {}}
        for name, part in runs:
            start = time.perf_counter()
            checks.update(part(texts))
            checks["seconds_per_part"][name] = time.perf_counter() - start
        want = {
            "docs_with_label": len(texts),
            "docs_tagged": len(texts),
            "answers": len(QUESTIONS) * len(texts),
        }
        checks["ok"] = all(checks[key] == n for key, n in want.items() if key in checks)
        return checks

    settings: Dict[str, Any] = {"precision": "fp32"}
    if system == "hf-qa":
        settings.update(
            batch_size=max(1, s.max_batch_tokens // QA_MAX_SEQ_LEN),
            max_seq_len=QA_MAX_SEQ_LEN,
            doc_stride=QA_DOC_STRIDE,
        )
    else:
        settings.update(batch_size=s.hf_batch_size, max_length=s.max_length, stride=s.stride)
    return run, settings
