"""`data prepare`: shards that decode to the input documents, a trained 8k tokenizer, a deterministic and
disjoint held-out split, JSON-lines and Parquet inputs, and typed errors naming the file for bad input."""

from __future__ import annotations

import hashlib
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from distro_node.node.cli.main import main
from distro_node.node.data.data_manifest import DataManifest
from distro_node.node.data.errors import (
    DataFileNotFoundError,
    DataFormatError,
    DataSettingError,
    MissingExtraError,
)
from distro_node.node.data.prepare import held_out, prepare
from distro_node.node.data.progress import Progress
from shard_corpus import SETTINGS, SPECIAL_DOCUMENTS, Prepared
from tokenizers import Tokenizer


def input_order(paths: list[Path], field: str = "text") -> list[str]:
    """The documents in the order prepare reads them: files sorted by path, JSON lines line by line."""
    docs: list[str] = []
    for path in sorted(paths):
        if path.suffix == ".jsonl":
            docs += [json.loads(line)[field] for line in path.read_text().splitlines() if line.strip()]
        else:
            docs.append(path.read_text())
    return docs


def decoded_split(folder: Path, split: str) -> list[str]:
    """Every document of a split, decoded with the dataset's own tokenizer, read straight from the files."""
    manifest = DataManifest.from_bytes((folder / "data.json").read_bytes())
    tokenizer = Tokenizer.from_file(str(folder / manifest.tokenizer.file))
    stream = np.concatenate([
        np.fromfile(folder / s.file, dtype=f"<u{2 if manifest.dtype == 'uint16' else 4}")
        for s in getattr(manifest, split).shards
    ])
    ends = np.flatnonzero(stream == manifest.tokenizer.eod_id)
    assert ends[-1] == stream.shape[0] - 1  # the split ends on a document end
    starts = np.concatenate([[0], ends[:-1] + 1])
    return [tokenizer.decode(stream[a:b].tolist(), skip_special_tokens=False) for a, b in zip(starts, ends,
                                                                                               strict=True)]


def test_shards_decode_to_the_input_documents(prepared: Prepared) -> None:
    m = prepared.result.manifest
    assert m.tokenizer.vocab_size == SETTINGS.vocab_size  # enough distinct words to fill an 8k vocabulary
    assert m.dtype == "uint16" and m.tokenizer.eod_id == 0
    expected = input_order(prepared.inputs)
    assert sorted(expected) == sorted(prepared.docs)
    held = {d: held_out(d.encode(), SETTINGS.eval_fraction) for d in expected}
    assert decoded_split(prepared.folder, "train") == [d for d in expected if not held[d]]
    assert decoded_split(prepared.folder, "heldout") == [d for d in expected if held[d]]
    # Fixed-size shards, several per split, and the manifest's counts are the files' counts.
    for split in (m.train, m.heldout):
        assert [s.tokens for s in split.shards[:-1]] == [SETTINGS.shard_tokens] * (len(split.shards) - 1)
        for s in split.shards:
            assert (prepared.folder / s.file).stat().st_size == 2 * s.tokens
            assert hashlib.sha256((prepared.folder / s.file).read_bytes()).hexdigest() == s.sha256
    assert len(m.train.shards) >= 4
    # Documents of 30-700 words: all usable by 32-token windows, fewer by longer ones, none by 2048.
    coverage = prepared.result.coverage
    assert coverage[64] > 0.99 and coverage[64] >= coverage[512] >= coverage[2048] and coverage[2048] < 0.01
    assert m.train.documents + m.heldout.documents == len(prepared.docs)
    assert DataManifest.from_bytes(prepared.result.path.read_bytes()) == m
    tokenizer_bytes = (prepared.folder / "tokenizer.json").read_bytes()
    assert hashlib.sha256(tokenizer_bytes).hexdigest() == m.tokenizer.sha256
    # Every file as content (what a fetch by sha256 asks for): the hash and byte size of what is on disk.
    blobs = m.blobs()
    assert [b.file for b in blobs] == m.files
    # The tokenizer, the document index, then every shard.
    assert len(blobs) == 2 + len(m.train.shards) + len(m.heldout.shards) and blobs[1].file == "index.u64"
    for blob in blobs:
        data = (prepared.folder / blob.file).read_bytes()
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (blob.sha256, blob.size)


def test_heldout_split_is_deterministic_and_disjoint(prepared: Prepared, tmp_path: Path) -> None:
    m = prepared.result.manifest
    train = set(decoded_split(prepared.folder, "train"))
    heldout = set(decoded_split(prepared.folder, "heldout"))
    assert not train & heldout
    assert 0.05 < m.heldout.documents / len(prepared.docs) < 0.15  # about eval_fraction 0.1
    # Another selection and order of the same documents, with the dataset's tokenizer given: each document
    # lands on the same side, and the given tokenizer is copied byte for byte.
    jsonl = sorted(p for p in prepared.inputs if p.suffix == ".jsonl")
    again = prepare(jsonl[::-1], tmp_path / "again", SETTINGS,
                    tokenizer_path=prepared.folder / "tokenizer.json", progress=False)
    assert not again.trained_tokenizer
    assert again.manifest.tokenizer == m.tokenizer
    assert set(decoded_split(tmp_path / "again", "heldout")) == heldout & set(input_order(jsonl))
    assert set(decoded_split(tmp_path / "again", "train")) == train & set(input_order(jsonl))


def test_special_token_text_stays_text(prepared: Prepared) -> None:
    decoded = set(decoded_split(prepared.folder, "train")) | set(decoded_split(prepared.folder, "heldout"))
    assert set(SPECIAL_DOCUMENTS) <= decoded


def test_jsonl_field_and_parquet_inputs(prepared: Prepared, tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    docs = prepared.docs[:60]
    (tmp_path / "in").mkdir()
    lines = [json.dumps({"body": d}) for d in docs[:30]] + ["", json.dumps({"body": ""})]
    (tmp_path / "in" / "a.jsonl").write_text("\n".join(lines) + "\n")
    table = pa.table({"id": list(range(31)), "body": [*docs[30:60], None]})
    pq.write_table(table, tmp_path / "in" / "b.parquet", row_group_size=7)
    settings = SETTINGS.__class__(**{**SETTINGS.__dict__, "text_field": "body", "eval_fraction": 0.3})
    result = prepare([tmp_path / "in"], tmp_path / "out", settings,
                     tokenizer_path=prepared.folder / "tokenizer.json", progress=False)
    assert result.skipped_documents == 2  # the empty JSON text and the Parquet null
    got = decoded_split(tmp_path / "out", "train") + decoded_split(tmp_path / "out", "heldout")
    assert sorted(got) == sorted(docs)
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really parquet")
    with pytest.raises(DataFormatError, match=r"broken\.parquet: cannot read as Parquet"):
        prepare([broken], tmp_path / "out2", settings, tokenizer_path=prepared.folder / "tokenizer.json",
                progress=False)
    with pytest.raises(DataFormatError, match=r"b\.parquet: no column 'text'"):
        prepare([tmp_path / "in" / "b.parquet"], tmp_path / "out2", SETTINGS,
                tokenizer_path=prepared.folder / "tokenizer.json", progress=False)


def test_bad_inputs_are_typed_errors_naming_the_file(prepared: Prepared, tmp_path: Path) -> None:
    tok = prepared.folder / "tokenizer.json"

    def run(path: Path, **changes: object) -> None:
        settings = SETTINGS.__class__(**{**SETTINGS.__dict__, **changes})
        prepare([path], tmp_path / "out", settings, tokenizer_path=tok, progress=False)

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": "broken\n')
    with pytest.raises(DataFormatError, match=r"bad\.jsonl: line 2: not a JSON object"):
        run(bad)
    bad.write_text('{"body": "no text field"}\n')
    with pytest.raises(DataFormatError, match=r"line 1: no field 'text'"):
        run(bad)
    bad.write_text('{"text": 3}\n')
    with pytest.raises(DataFormatError, match="not a string"):
        run(bad)
    latin = tmp_path / "latin.txt"
    latin.write_bytes("café".encode("latin-1"))
    with pytest.raises(DataFormatError, match=r"latin\.txt: not UTF-8 text \(byte 3"):
        run(latin)
    with pytest.raises(DataFileNotFoundError, match="missing"):
        run(tmp_path / "missing")
    good = tmp_path / "good.txt"
    good.write_text("one small document")
    with pytest.raises(DataFormatError, match=r"tokenizer\.json: has no token '<eos>'"):
        run(good, eod_token="<eos>")
    with pytest.raises(DataSettingError, match="the held-out split got none of the 1 documents"):
        run(good)  # a single document cannot fill both splits
    assert not (tmp_path / "out" / "data.json").exists()  # a failed preparation leaves no manifest


def test_progress_bar_draws_only_when_asked() -> None:
    stream = io.StringIO()
    with Progress("tokenizing", 2_000_000, stream=stream, enabled=True) as bar:
        bar.advance(1_000_000)
    assert "tokenizing  50%" in stream.getvalue() and stream.getvalue().endswith("\n")
    assert "1.0M/2.0M B" in stream.getvalue().splitlines()[-1].split("\r")[-1]
    quiet = io.StringIO()  # not a terminal: nothing drawn by default
    with Progress("tokenizing", 10, stream=quiet) as bar:
        bar.advance(10)
    assert quiet.getvalue() == ""


def test_missing_extra_names_the_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers now raises ImportError
    (tmp_path / "a.txt").write_text("text")
    with pytest.raises(MissingExtraError, match=r"pip install 'distro-node\[data\]'"):
        prepare([tmp_path / "a.txt"], tmp_path / "out", SETTINGS, progress=False)


def test_cli_prepares_and_refuses_to_overwrite(prepared: Prepared, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    jsonl = [str(p) for p in prepared.inputs if p.suffix == ".jsonl"]
    args = ["data", "prepare", *jsonl, "--out", str(tmp_path / "ds"), "--tokenizer",
            str(prepared.folder / "tokenizer.json"), "--eval-fraction", "0.2", "--shard-tokens", "4096"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "wrote" in out and "uint16 shard(s)" in out and "--data-kind shards" in out
    assert "at seq_len 2048" in out  # how much of the data each preset's window length can use
    manifest = DataManifest.from_bytes((tmp_path / "ds" / "data.json").read_bytes())
    assert manifest.eval_fraction == 0.2 and manifest.shard_tokens == 4096
    assert main(args) == 2
    assert "already holds a prepared dataset" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0
    assert main([*args[:-2], "--shard-tokens", "7", "--force"]) == 2
    assert "prepare.shard_tokens" in capsys.readouterr().err
