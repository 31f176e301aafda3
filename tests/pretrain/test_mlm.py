"""BERT's masking (80/10/10, special tokens, whole words) and the masked-LM trainer."""

from pathlib import Path

import numpy
import pytest
import torch

from spacy_bert_pipes.pretrain.mlm import (
    IGNORE_INDEX,
    Window,
    collate,
    encode_texts,
    load_masked_lm,
    mask_tokens,
    replacement_ids,
)

MASK_ID = 4
SPECIAL_IDS = torch.tensor([0, 1, 2, 3, 4])  # [PAD] [UNK] [CLS] [SEP] [MASK]
VOCAB = torch.arange(5, 30_005)


def random_batch(rows: int, length: int, seed: int = 0) -> tuple:
    """Ids from a 30,000-piece vocabulary with [CLS], [SEP] and padding."""
    gen = torch.Generator().manual_seed(seed)
    ids = VOCAB[torch.randint(len(VOCAB), (rows, length), generator=gen)]
    lengths = torch.randint(length // 2, length + 1, (rows,), generator=gen)
    ids[:, 0] = 2
    for row, n in enumerate(lengths.tolist()):
        ids[row, n - 1] = 3
        ids[row, n:] = 0
    return ids, torch.isin(ids, SPECIAL_IDS)


def test_80_10_10_over_100k_masked_positions() -> None:
    ids, special = random_batch(2000, 500)
    corrupted, labels = mask_tokens(
        ids,
        special,
        mask_id=MASK_ID,
        replacement_ids=VOCAB,
        generator=torch.Generator().manual_seed(1),
    )
    chosen = labels != IGNORE_INDEX
    n_chosen = int(chosen.sum())
    assert n_chosen >= 100_000
    # 15% of the pieces that are not special tokens.
    assert n_chosen / int((~special).sum()) == pytest.approx(0.15, abs=0.01)
    assert torch.equal(labels[chosen], ids[chosen])
    masked = (corrupted[chosen] == MASK_ID).float().mean().item()
    kept = (corrupted[chosen] == ids[chosen]).float().mean().item()
    replaced = ((corrupted[chosen] != ids[chosen]) & (corrupted[chosen] != MASK_ID)).float()
    # A random piece equals the original 1 time in 30,000: `kept` may gain 0.0003%.
    assert masked == pytest.approx(0.80, abs=0.01)
    assert replaced.mean().item() == pytest.approx(0.10, abs=0.01)
    assert kept == pytest.approx(0.10, abs=0.01)
    # Positions not chosen are untouched.
    assert torch.equal(corrupted[~chosen], ids[~chosen])


def test_special_tokens_and_padding_are_never_chosen() -> None:
    ids, special = random_batch(500, 64, seed=3)
    for seed in range(5):
        corrupted, labels = mask_tokens(
            ids,
            special,
            mask_id=MASK_ID,
            replacement_ids=VOCAB,
            generator=torch.Generator().manual_seed(seed),
            mlm_probability=0.9,
        )
        assert (labels[special] == IGNORE_INDEX).all()
        assert torch.equal(corrupted[special], ids[special])


def test_random_replacements_come_from_the_allowed_ids() -> None:
    ids, special = random_batch(500, 64)
    allowed = torch.tensor([7, 8, 9])
    corrupted, labels = mask_tokens(
        ids,
        special,
        mask_id=MASK_ID,
        replacement_ids=allowed,
        generator=torch.Generator().manual_seed(0),
    )
    chosen = labels != IGNORE_INDEX
    replaced = chosen & (corrupted != ids) & (corrupted != MASK_ID)
    assert replaced.any()
    assert torch.isin(corrupted[replaced], allowed).all()


def test_same_seed_same_masks() -> None:
    ids, special = random_batch(50, 32)

    def run(seed: int) -> tuple:
        return mask_tokens(
            ids,
            special,
            mask_id=MASK_ID,
            replacement_ids=VOCAB,
            generator=torch.Generator().manual_seed(seed),
        )

    first, second, other = run(5), run(5), run(6)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    assert not torch.equal(first[1], other[1])


def test_whole_word_masking_chooses_all_pieces_of_a_word() -> None:
    rows, length = 1000, 120
    gen = torch.Generator().manual_seed(0)
    ids = VOCAB[torch.randint(len(VOCAB), (rows, length), generator=gen)]
    # Words of 1 to 4 pieces; [CLS] first, [SEP] last.
    sizes = torch.randint(1, 5, (rows, length), generator=gen)
    words = torch.full((rows, length), -1, dtype=torch.long)
    for row in range(rows):
        pieces = torch.repeat_interleave(torch.arange(length), sizes[row])[: length - 2]
        words[row, 1:-1] = pieces
    ids[:, 0], ids[:, -1] = 2, 3
    special = torch.isin(ids, SPECIAL_IDS)
    corrupted, labels = mask_tokens(
        ids,
        special,
        mask_id=MASK_ID,
        replacement_ids=VOCAB,
        generator=torch.Generator().manual_seed(2),
        word_ids=words,
    )
    chosen = labels != IGNORE_INDEX
    assert not chosen[special].any()
    for row in range(0, rows, 50):
        for word in words[row].unique().tolist():
            if word < 0:
                continue
            in_word = chosen[row][words[row] == word]
            assert in_word.all() or not in_word.any()
    # Each piece's word is chosen with p = 0.15: the piece share stays 15%.
    assert chosen.sum().item() / (~special).sum().item() == pytest.approx(0.15, abs=0.01)
    # The 80/10/10 split is per piece, as in BERT's whole-word masking.
    assert (corrupted[chosen] == MASK_ID).float().mean().item() == pytest.approx(0.8, abs=0.02)


def test_replacement_ids_leave_out_special_and_unused(tmp_path: Path) -> None:
    from transformers import BertTokenizerFast

    vocab = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf8")
    tokenizer = BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt"))
    assert replacement_ids(tokenizer, len(vocab)).tolist() == [7, 8]
    assert replacement_ids(tokenizer, 8).tolist() == [7]


def test_long_texts_are_cut_into_windows(tiny_bert: Path) -> None:
    tokenizer = load_masked_lm(str(tiny_bert)).tokenizer
    text = " ".join(["my card still not arrived"] * 20) + " unbelievable"
    found = list(encode_texts(tokenizer, ["hello world", text], 16, words=True))
    assert [index for index, _ in found][:2] == [0, 1]
    assert all(len(w.ids) <= 16 for _, w in found)
    assert all(w.ids[0] == tokenizer.cls_token_id for _, w in found)
    assert all(w.ids[-1] == tokenizer.sep_token_id for _, w in found)
    pieces = [i for index, w in found if index == 1 for i in w.ids[1:-1].tolist()]
    assert pieces == tokenizer(text, add_special_tokens=False)["input_ids"]
    for _, window in found:
        assert window.words is not None
        assert window.words[0] == -1 and window.words[-1] == -1
        assert window.words[1] == 0  # numbered from 0 in each window
        assert (numpy.diff(window.words[1:-1]) >= 0).all()


def test_collate_pads_and_marks_special_tokens() -> None:
    windows = [
        Window(numpy.array([2, 10, 1, 3], dtype=numpy.int32)),
        Window(numpy.array([2, 11, 3], dtype=numpy.int32)),
    ]
    batch = collate(windows, pad_id=0, special_ids=SPECIAL_IDS)
    assert batch.input_ids.tolist() == [[2, 10, 1, 3], [2, 11, 3, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    # [UNK] is special too: predicting it teaches nothing.
    assert batch.special_mask.tolist() == [[True, False, True, True], [True, False, True, True]]
    assert batch.word_ids is None


def test_new_head_is_reported(tiny_bert: Path, tmp_path: Path) -> None:
    mlm = load_masked_lm(str(tiny_bert))
    assert mlm.new_head and all(name.startswith("cls.") for name in mlm.new_head)
    mlm.model.save_pretrained(tmp_path, safe_serialization=True)
    mlm.tokenizer.save_pretrained(tmp_path)
    assert load_masked_lm(str(tmp_path)).new_head == []


def test_bad_encoder_source_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no config.json"):
        load_masked_lm(str(tmp_path))
