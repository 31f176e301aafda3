"""Tiny random checkpoints of every encoder family the README promises, built offline,
and a pipeline of every component on one (`family_pipeline`).

Each family's tokenizer is trained in the test on a few hundred short texts with
the algorithm its real checkpoints use (WordPiece, byte-level BPE, SentencePiece
unigram), wrapped in that family's fast tokenizer class and given its pair
template; the model is that family's architecture, 2 layers, hidden width 32,
random weights. Imported as a module (`from families import ...`), like helpers.
"""

import string
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import spacy
from helpers import NER_TEXTS, TRAIN_TEXTS, WORDS, loader_config
from spacy.language import Language
from spacy.training import Example
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

# The families of the README's "any BERT-family checkpoint", and the newer one.
FAMILIES = (
    "bert-uncased",
    "bert-cased",
    "roberta",
    "xlm-roberta",
    "distilbert",
    "albert",
    "electra",
    "deberta-v3",
)
# Families whose input embeddings are narrower than the hidden states.
FACTORIZED = ("albert", "electra")
HIDDEN = 32
EMBEDDING = 16  # ALBERT's and ELECTRA's embedding size, below HIDDEN
MAX_POSITIONS = 128

HEADS = ("sequence", "token", "qa")
QUESTION = "Who is in Paris?"
# The special tokens of RoBERTa's and XLM-R's tokenizers.
ROBERTA_NAMES = {
    "bos_token": "<s>",
    "eos_token": "</s>",
    "sep_token": "</s>",
    "cls_token": "<s>",
    "unk_token": "<unk>",
    "pad_token": "<pad>",
    "mask_token": "<mask>",
}
SMALL = {"max_length": 16, "stride": 4, "max_batch_tokens": 256}


def corpus() -> List[str]:
    """The texts the tokenizers learn from: the tests' own texts, cased and
    lowercased, and every word of helpers.WORDS."""
    texts = [text for text, _ in TRAIN_TEXTS] + [text for text, _ in NER_TEXTS]
    cased = [
        "John Smith is in Paris .",
        "Apple is a company in London , not in New York !",
        "Google and the Bank of London are in New York .",
        "What is my PIN ? Why was my card not working ?",
        "Hello World : exchange rate 1.25 , top up 100 cash .",
    ]
    words = " ".join(WORDS)
    return (texts + cased + [t.lower() for t in cased] + [words, words.title()]) * 4


def _alphabet() -> List[str]:
    return list(string.ascii_letters + string.digits + string.punctuation)


def _wordpiece(lowercase: bool) -> Tuple[Any, Dict[str, str]]:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=_alphabet()
    )
    tok.train_from_iterator(corpus(), trainer)
    tok.post_processor = processors.BertProcessing(
        sep=("[SEP]", tok.token_to_id("[SEP]")), cls=("[CLS]", tok.token_to_id("[CLS]"))
    )
    return tok, {
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "mask_token": "[MASK]",
    }


def _byte_bpe() -> Tuple[Any, Dict[str, str]]:
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=500,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(), trainer)
    tok.post_processor = processors.RobertaProcessing(
        sep=("</s>", 2), cls=("<s>", 0), trim_offsets=True, add_prefix_space=False
    )
    return tok, dict(ROBERTA_NAMES)


def _unigram(
    specials: List[str], names: Dict[str, str], template: Tuple[str, str], lowercase: bool
) -> Tuple[Any, Dict[str, str]]:
    """A SentencePiece-style unigram tokenizer (Metaspace pre-tokenizer, "▁"
    word starts) with the given special tokens, in order from id 0, and pair
    template (single, pair)."""
    tok = Tokenizer(models.Unigram())
    steps = [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')]
    if lowercase:
        steps.append(normalizers.Lowercase())
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(
        vocab_size=400,
        special_tokens=specials,
        unk_token=names["unk_token"],
        initial_alphabet=_alphabet(),
    )
    tok.train_from_iterator(corpus(), trainer)
    ids = [(token, tok.token_to_id(token)) for token in specials]
    tok.post_processor = processors.TemplateProcessing(
        single=template[0], pair=template[1], special_tokens=ids
    )
    return tok, names


def write_tokenizer(family: str, path: Path) -> Any:
    """Train `family`'s tokenizer, save it in `path` and return it."""
    from transformers import (
        AlbertTokenizerFast,
        BertTokenizerFast,
        DebertaV2TokenizerFast,
        DistilBertTokenizerFast,
        ElectraTokenizerFast,
        RobertaTokenizerFast,
        XLMRobertaTokenizerFast,
    )

    bert_template = ("[CLS]:0 $A:0 [SEP]:0", "[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1")
    sp_names = {
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "mask_token": "[MASK]",
    }
    tokenizer: Any
    if family in ("bert-uncased", "bert-cased", "distilbert", "electra"):
        tok, names = _wordpiece(lowercase=family != "bert-cased")
        cls = {
            "distilbert": DistilBertTokenizerFast,
            "electra": ElectraTokenizerFast,
        }.get(family, BertTokenizerFast)
        tokenizer = cls(tokenizer_object=tok, do_lower_case=family != "bert-cased", **names)
    elif family == "roberta":
        tok, names = _byte_bpe()
        tokenizer = RobertaTokenizerFast(tokenizer_object=tok, **names)
    elif family == "xlm-roberta":
        names = dict(ROBERTA_NAMES)
        template = ("<s>:0 $A:0 </s>:0", "<s>:0 $A:0 </s>:0 </s>:0 $B:0 </s>:0")
        specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
        tok, names = _unigram(specials, names, template, lowercase=False)
        tokenizer = XLMRobertaTokenizerFast(tokenizer_object=tok, **names)
    elif family == "albert":
        specials = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
        names = dict(sp_names, pad_token="<pad>", unk_token="<unk>")
        tok, names = _unigram(specials, names, bert_template, lowercase=True)
        tokenizer = AlbertTokenizerFast(tokenizer_object=tok, do_lower_case=True, **names)
    elif family == "deberta-v3":
        specials = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
        tok, names = _unigram(specials, sp_names, bert_template, lowercase=False)
        tokenizer = DebertaV2TokenizerFast(tokenizer_object=tok, do_lower_case=False, **names)
    else:
        raise ValueError(f"Unknown family {family!r}; one of {FAMILIES}")
    tokenizer.model_max_length = MAX_POSITIONS
    tokenizer.save_pretrained(path)
    return tokenizer


def family_config(family: str, tokenizer: Any, **overrides: Any) -> Any:
    """The transformers config of a tiny `family` model for `tokenizer`."""
    from transformers import (
        AlbertConfig,
        BertConfig,
        DebertaV2Config,
        DistilBertConfig,
        ElectraConfig,
        RobertaConfig,
        XLMRobertaConfig,
    )

    common: Dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
    }
    layers = {
        "hidden_size": HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": MAX_POSITIONS,
    }
    config: Any
    if family in ("bert-uncased", "bert-cased"):
        config = BertConfig(**common, **layers)
    elif family in ("roberta", "xlm-roberta"):
        cls = RobertaConfig if family == "roberta" else XLMRobertaConfig
        positions = dict(layers, max_position_embeddings=MAX_POSITIONS + 2)
        config = cls(**common, **positions, type_vocab_size=1, bos_token_id=0, eos_token_id=2)
    elif family == "distilbert":
        config = DistilBertConfig(
            **common,
            dim=HIDDEN,
            n_layers=2,
            n_heads=2,
            hidden_dim=64,
            max_position_embeddings=MAX_POSITIONS,
        )
    elif family == "albert":
        config = AlbertConfig(**common, **layers, embedding_size=EMBEDDING)
    elif family == "electra":
        config = ElectraConfig(**common, **layers, embedding_size=EMBEDDING)
    elif family == "deberta-v3":
        config = DebertaV2Config(
            **common,
            **layers,
            type_vocab_size=0,
            relative_attention=True,
            position_biased_input=False,
            pos_att_type=["p2c", "c2p"],
            position_buckets=32,
            max_relative_positions=-1,
            norm_rel_ebd="layer_norm",
            share_att_key=True,
        )
    else:
        raise ValueError(f"Unknown family {family!r}; one of {FAMILIES}")
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


def write_family(
    family: str, path: Path, *, head: Optional[str] = None, labels: Optional[List[str]] = None
) -> Path:
    """A tiny random `family` checkpoint in `path` (its tokenizer trained here):
    the bare encoder, or with `head` ("sequence", "token" or "qa") a model of
    that head, `labels` its id2label, with weights of a visible scale."""
    import torch
    from transformers import (
        AutoModel,
        AutoModelForQuestionAnswering,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
    )

    path.mkdir(parents=True, exist_ok=True)
    tokenizer = write_tokenizer(family, path)
    overrides: Dict[str, Any] = {}
    if labels:
        overrides["id2label"] = dict(enumerate(labels))
        overrides["label2id"] = {label: i for i, label in enumerate(labels)}
    config = family_config(family, tokenizer, **overrides)
    builders = {
        None: AutoModel,
        "sequence": AutoModelForSequenceClassification,
        "token": AutoModelForTokenClassification,
        "qa": AutoModelForQuestionAnswering,
    }
    torch.manual_seed(0)
    model = builders[head].from_config(config)
    if head is not None:
        # random heads of a visible scale, so that answers and labels differ
        with torch.no_grad():
            for name, param in model.named_parameters():
                if any(part in name for part in ("classifier", "qa_outputs", "pre_classifier")):
                    param.normal_(0.0, 1.0)
    model.save_pretrained(path, safe_serialization=True)
    return path


def labelled(nlp: Language, questions: bool = True) -> List[Example]:
    cats = [{"card": 1.0, "other": 0.0}, {"card": 0.0, "other": 1.0}]
    examples = []
    for i, (text, ents) in enumerate(NER_TEXTS):
        doc = nlp.make_doc(text.title())
        entities = [(s, e, label) for s, e, label in ents]
        example = Example.from_dict(doc, {"entities": entities, "cats": cats[i % 2]})
        if questions:
            example.reference._.questions = {"who": QUESTION}
        examples.append(example)
    return examples


def family_pipeline(path: Path) -> Language:
    """bert_textcat and bert_ner (case embeddings) listening to a shared encoder,
    bert_qa on its own, all from `path`, initialized."""
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder", config={"model": dict(SMALL, case_embeddings=True)})
    listener = {"@architectures": "spacy-bert-pipes.EncoderListener.v1"}
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": listener}})
    nlp.add_pipe("bert_ner", config={"model": {"encoder": listener}})
    qa_model = {"encoder": SMALL, "max_seq_len": 24, "doc_stride": 4, "max_question_len": 8}
    nlp.add_pipe("bert_qa", config={"model": qa_model, "questions": {"who": QUESTION}})
    for name in ("bert_encoder", "bert_qa"):
        nlp.config["initialize"]["components"][name] = loader_config(path)
    nlp.initialize(lambda: labelled(nlp))
    return nlp
