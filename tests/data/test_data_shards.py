"""A prepared dataset as a TokenSource: batches fixed by (run, step, peer), windows inside one document, and
every way its files can be wrong reported as a typed error naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from distro_node.node.data.data_manifest import MAX_MANIFEST_BYTES
from distro_node.node.data.errors import DataFileNotFoundError, DataManifestError, ShardError, TokenRangeError
from distro_node.node.data.sampling import eval_batches, sample_batch
from distro_node.node.data.shards import open_shards
from shard_corpus import Prepared, copy_dataset, edit_manifest, rewrite_shard

RUN = b"\x07" * 32


def batch(folder: Path, step: int, peer: str, run: bytes = RUN) -> torch.Tensor:
    x, y = sample_batch(open_shards(folder), run_id=run, step=step, peer=peer, batch_size=8, seq_len=64)
    assert torch.equal(x[:, 1:], y[:, :-1])
    return torch.cat([x, y[:, -1:]], dim=1)


def test_source_has_one_row_per_document(prepared: Prepared) -> None:
    source = open_shards(prepared.folder)  # the folder or its data.json
    assert open_shards(prepared.result.path).train.rows == source.train.rows
    m = prepared.result.manifest
    assert source.vocab_size == m.tokenizer.vocab_size and source.tokenizer_sha256 == m.tokenizer.sha256
    assert (source.train.rows, source.eval.rows) == (m.train.documents, m.heldout.documents)
    assert (source.train.tokens, source.eval.tokens) == (m.train.tokens, m.heldout.tokens)
    eod = m.tokenizer.eod_id
    for split in (source.train, source.eval):
        for row in range(split.rows):
            doc = split.read(row, 0, int(split.lengths[row]))  # crosses a shard boundary for some rows
            assert doc[-1] == eod and not (doc[:-1] == eod).any()
    assert 0 < source.train.coverage(64) <= 1


def test_batches_are_a_function_of_run_step_and_peer(prepared: Prepared, tmp_path: Path) -> None:
    a = batch(prepared.folder, 5, "peer-a")
    assert torch.equal(a, batch(prepared.folder, 5, "peer-a"))
    assert torch.equal(a, batch(copy_dataset(prepared.folder, tmp_path / "copy"), 5, "peer-a"))
    for other in (batch(prepared.folder, 5, "peer-b"), batch(prepared.folder, 6, "peer-a"),
                  batch(prepared.folder, 5, "peer-a", run=b"\x08" * 32)):
        assert not torch.equal(a, other)
    # Windows never cross a document boundary: the end token can only be a window's last target.
    eod = prepared.result.manifest.tokenizer.eod_id
    for step in range(20):
        windows = batch(prepared.folder, step, f"p{step % 3}")
        assert not (windows[:, :-1] == eod).any()


def test_eval_batches_come_from_the_heldout_documents(prepared: Prepared) -> None:
    source = open_shards(prepared.folder)
    first = list(eval_batches(source, batch_size=4, seq_len=32, max_batches=5))
    assert len(first) == 5
    again = list(eval_batches(open_shards(prepared.folder), batch_size=4, seq_len=32, max_batches=5))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(first, again, strict=True))
    heldout = np.concatenate([source.eval.read(r, 0, int(source.eval.lengths[r])) for r in range(3)])
    x, _y = first[0]
    assert np.array_equal(x[0].numpy(), heldout[:32])  # the first window starts the first held-out document


def test_a_window_longer_than_every_document_is_refused(prepared: Prepared) -> None:
    source = open_shards(prepared.folder)
    longest = int(source.train.lengths.max())
    with pytest.raises(Exception, match=f"needs rows of at least {longest + 1} tokens.*longest document"):
        sample_batch(source, run_id=RUN, step=0, peer="p", batch_size=1, seq_len=longest)


@pytest.fixture
def copy(prepared: Prepared, tmp_path: Path) -> Path:
    return copy_dataset(prepared.folder, tmp_path / "ds")


def shard_path(folder: Path, split: str = "train", index: int = 1) -> Path:
    return folder / json.loads((folder / "data.json").read_text())[split]["shards"][index]["file"]


def test_truncated_shard(copy: Path) -> None:
    path = shard_path(copy)
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(ShardError, match=rf"{path.name}: 131070 bytes is short \(truncated\?\)"):
        open_shards(copy)


def test_corrupt_shard(copy: Path) -> None:
    path = shard_path(copy, "heldout", 0)
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(ShardError, match=rf"{path.name}: sha256 is [0-9a-f]{{64}}, the manifest says"):
        open_shards(copy)


def test_missing_shard_and_tokenizer(copy: Path) -> None:
    shard_path(copy).unlink()
    with pytest.raises(ShardError, match="train shard 1 is missing"):
        open_shards(copy)
    (copy / "tokenizer.json").unlink()
    with pytest.raises(ShardError, match=r"tokenizer\.json: the dataset's tokenizer \(sha256 [0-9a-f]{64}\)"):
        open_shards(copy)
    with pytest.raises(DataFileNotFoundError):
        open_shards(copy / "nowhere.json")


def test_replaced_tokenizer_names_both_hashes(copy: Path) -> None:
    raw = (copy / "tokenizer.json").read_bytes()
    (copy / "tokenizer.json").write_bytes(raw + b" ")
    with pytest.raises(ShardError, match=r"tokenizer\.json: \d+ bytes, the data manifest's tokenizer\.bytes"):
        open_shards(copy)
    (copy / "tokenizer.json").write_bytes(raw[:-1] + b" ")
    with pytest.raises(ShardError, match="not the tokenizer of these shards"):
        open_shards(copy)


def test_token_id_beyond_the_vocabulary(copy: Path, prepared: Prepared) -> None:
    path = shard_path(copy, "train", 0)
    tokens = np.fromfile(path, dtype="<u2")
    tokens[1234] = prepared.result.manifest.tokenizer.vocab_size  # one past the last id
    rewrite_shard(copy, "train", 0, tokens.tobytes())
    with pytest.raises(TokenRangeError, match=rf"{path.name}: token 8000 at position 1234 is >= vocab_size"):
        open_shards(copy)


def test_document_count_that_does_not_match(copy: Path, prepared: Prepared) -> None:
    path = shard_path(copy, "train", 2)
    tokens = np.fromfile(path, dtype="<u2")
    tokens[10] = prepared.result.manifest.tokenizer.eod_id  # one more end token, hash updated
    rewrite_shard(copy, "train", 2, tokens.tobytes())
    with pytest.raises(ShardError, match=rf"{path.name}: holds more than end-of-document tokens"):
        open_shards(copy)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d["train"]["shards"][0].update(tokens=d["train"]["shards"][0]["tokens"] - 1),
         r"train\.shards\[0\]\.tokens: every shard but the last"),
        (lambda d: d["train"].update(tokens=d["train"]["tokens"] + 1),
         r"train\.tokens: is \d+ but its shards"),
        (lambda d: d["heldout"].update(documents=1), r"heldout\.documents: is 1 but its shards end"),
        (lambda d: d["train"]["shards"][0].update(sha256="ab" * 31), r"train\.shards\[0\]\.sha256: must be"),
        (lambda d: d["train"]["shards"][0].update(file="../../etc/passwd"), r"train\.shards\[0\]\.file"),
        (lambda d: d["heldout"]["shards"][0].update(file=d["train"]["shards"][0]["file"]),
         "files: file names"),
        (lambda d: d["tokenizer"].update(vocab_size=70000), "dtype: must be uint32 for vocab_size 70000"),
        (lambda d: d["tokenizer"].update(eod_id=8000),
         r"tokenizer\.eod_id: must be an integer in \[0, 7999\]"),
        (lambda d: d.update(version=2), r"version: must be an integer in \[1, 1\]"),
        (lambda d: d.update(extra=1), r"\(top\): expected exactly the keys"),
        (lambda d: d["heldout"].update(shards=[]), r"heldout\.shards: must be a non-empty list"),
        (lambda d: d.update(eval_fraction=1.5), r"eval_fraction: must be a number in \(0, 1\)"),
    ],
)
def test_bad_manifest_names_the_field(copy: Path, change: object, field: str) -> None:
    edit_manifest(copy, change)
    with pytest.raises(DataManifestError, match=rf"data\.json: {field}"):
        open_shards(copy)


def test_manifest_with_a_wrong_shard_hash(copy: Path) -> None:
    edit_manifest(copy, lambda d: d["train"]["shards"][3].update(sha256="0" * 64))
    name = shard_path(copy, "train", 3).name
    with pytest.raises(ShardError, match=rf"{name}: sha256 is .* the manifest says 0{{64}}"):
        open_shards(copy)


def test_oversized_or_garbled_manifest(copy: Path) -> None:
    (copy / "data.json").write_bytes(b"{" + b" " * MAX_MANIFEST_BYTES + b"}")
    with pytest.raises(DataManifestError, match=r"\(file\): \d+ bytes, more than the cap"):
        open_shards(copy)
    (copy / "data.json").write_bytes(b"\xff\xfe")
    with pytest.raises(DataManifestError, match=r"\(file\): not JSON"):
        open_shards(copy)
