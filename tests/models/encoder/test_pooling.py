"""Pooling recipes read from sentence-transformers checkpoints, and the pooling itself."""

from pathlib import Path

import numpy
import pytest
from helpers import write_sentence_transformers_layout

from spacy_bert_pipes.models.encoder.pooling import Pooling, pool, pool_doc, read_pooling
from spacy_bert_pipes.models.types import DocEncoding


def st_folder(path: Path, pooling: dict, normalize: bool) -> Path:
    return write_sentence_transformers_layout(
        path, pooling, normalize=normalize, max_seq_length=256
    )


def test_reads_modes_in_sentence_transformers_order(tmp_path: Path) -> None:
    config = {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True}
    recipe = read_pooling(str(st_folder(tmp_path, config, normalize=False)))
    assert recipe.modes == ("cls", "mean") and not recipe.normalize
    assert recipe.max_seq_length == 256


def test_reads_the_newer_single_mode_key(tmp_path: Path) -> None:
    recipe = read_pooling(str(st_folder(tmp_path, {"pooling_mode": "max"}, normalize=True)))
    assert recipe.modes == ("max",) and recipe.normalize


def test_plain_checkpoint_is_mean(tmp_path: Path) -> None:
    assert read_pooling(str(tmp_path)) == Pooling(("mean",), False, str(tmp_path))


@pytest.mark.parametrize(
    "config,message",
    [
        ({"pooling_mode_lasttoken": True}, "pooling_mode_lasttoken is not supported"),
        ({"pooling_mode": "weightedmean"}, "'weightedmean' is not supported"),
        ({}, "no pooling mode"),
    ],
)
def test_unsupported_recipes_name_the_file(tmp_path: Path, config: dict, message: str) -> None:
    st_folder(tmp_path, config, normalize=False)
    with pytest.raises(ValueError, match=message) as error:
        read_pooling(str(tmp_path))
    assert "1_Pooling/config.json" in str(error.value)


def test_broken_json_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "modules.json").write_text("[{")
    with pytest.raises(ValueError, match="modules.json"):
        read_pooling(str(tmp_path))


def test_pool_modes() -> None:
    rows = numpy.asarray([[1.0, -2.0], [3.0, 0.0], [2.0, 5.0], [2.0, 1.0]], dtype="f")
    enc = DocEncoding(
        cls=rows[0], wordpieces=rows[1:3], offsets=numpy.zeros((2, 2), "i"), sep=rows[3]
    )
    numpy.testing.assert_allclose(pool_doc(enc, Pooling(("mean",))), rows.mean(0))
    numpy.testing.assert_allclose(pool_doc(enc, Pooling(("max",))), rows.max(0))
    numpy.testing.assert_allclose(pool_doc(enc, Pooling(("mean_sqrt_len",))), rows.sum(0) / 2.0)
    both = pool_doc(enc, Pooling(("mean", "cls")))  # concatenated as cls, mean
    numpy.testing.assert_allclose(both, numpy.concatenate([rows[0], rows.mean(0)]))
    unit = pool_doc(enc, Pooling(("mean",), normalize=True))
    assert numpy.linalg.norm(unit) == pytest.approx(1.0)
    # a span has no [CLS]: "cls" falls back to the mean of its rows
    numpy.testing.assert_allclose(pool(rows[1:3], Pooling(("cls",))), rows[1:3].mean(0))
    # an encoding without [SEP] pools what it has
    old = DocEncoding(cls=rows[0], wordpieces=rows[1:3], offsets=numpy.zeros((2, 2), "i"))
    numpy.testing.assert_allclose(pool_doc(old, Pooling()), rows[:3].mean(0))


def test_sep_survives_serialization() -> None:
    import srsly

    enc = DocEncoding(
        cls=numpy.ones(3, "f"),
        wordpieces=numpy.zeros((1, 3), "f"),
        offsets=numpy.zeros((1, 2), "i"),
        sep=numpy.full(3, 2.0, "f"),
    )
    back = srsly.msgpack_loads(srsly.msgpack_dumps({"e": enc}))["e"]
    numpy.testing.assert_array_equal(back.sep, enc.sep)
    assert DocEncoding.from_dict({k: v for k, v in enc.to_dict().items() if k != "sep"}).sep is None


def test_unknown_mode_is_an_error() -> None:
    with pytest.raises(ValueError, match="Unknown pooling mode"):
        Pooling(("median",))
