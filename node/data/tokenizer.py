"""A run's tokenizer: a Hugging Face ``tokenizers`` file (tokenizer.json), trained here or brought along.

Why this format: it is one self-contained JSON file that the Rust library (and transformers) load the same
way everywhere, so a run can name it by sha256 and every peer, and any later export, decodes the same ids to
the same text. Training is byte-level BPE: every UTF-8 text encodes without an unknown token and decodes back
to itself exactly, which ``data prepare`` relies on (its tests check decoded shards against the input).

Documents are separated by an end-of-document token, a special token of the tokenizer. Special tokens are
encoded as plain text inside documents (``encode_special_tokens``), so a document that happens to contain
the literal text ``<|endoftext|>`` cannot forge a document boundary.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from distro_node.node.data.data_manifest import MAX_TOKENIZER_BYTES, MAX_VOCAB
from distro_node.node.data.errors import DataFormatError, DataSettingError
from distro_node.node.data.extras import require_tokenizers

if TYPE_CHECKING:
    from tokenizers import Tokenizer

# Token ids below this fit uint16 shards (ids 0..65535); larger vocabularies take uint32.
UINT16_VOCAB = 1 << 16


@dataclass(frozen=True)
class TokenizerInfo:
    """What a run and a data manifest record of a tokenizer."""

    sha256: str
    bytes: int  # of tokenizer.json
    vocab_size: int  # highest id + 1: the model's embedding rows
    eod_id: int
    eod_token: str

    @property
    def dtype(self) -> str:
        return "uint16" if self.vocab_size <= UINT16_VOCAB else "uint32"


def _prepared(tokenizer: Tokenizer) -> Tokenizer:
    tokenizer.encode_special_tokens = True  # not saved in tokenizer.json: set on every load
    return tokenizer


def train_bpe(documents: Iterable[str], *, vocab_size: int, eod_token: str) -> Tokenizer:
    """A byte-level BPE tokenizer of at most ``vocab_size`` ids trained on ``documents`` (offline).

    The vocabulary may come out smaller when the text has fewer distinct pairs to merge; the run takes
    the size the tokenizer really has. ``eod_token`` is id 0."""
    tk = require_tokenizers("training a tokenizer (distro-node data prepare)")
    if vocab_size < 257:  # 256 byte symbols + the end-of-document token
        raise DataSettingError("vocab_size", f"must be at least 257 for a byte-level BPE, got {vocab_size}")
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[eod_token],
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer=trainer)
    return _prepared(tokenizer)


def tokenizer_bytes(tokenizer: Tokenizer) -> bytes:
    """The bytes of tokenizer.json for a tokenizer trained here (what its sha256 is taken over)."""
    return tokenizer.to_str().encode("utf-8")


def load_tokenizer(path: Path) -> tuple[Tokenizer, bytes]:
    """A tokenizer.json and its exact bytes (copied verbatim into a prepared dataset, so the sha256 a run
    names is the one of the file the user brought)."""
    tk = require_tokenizers("reading a tokenizer.json")
    if not path.is_file():
        raise DataFormatError(path, "tokenizer file not found")
    if path.stat().st_size > MAX_TOKENIZER_BYTES:
        raise DataFormatError(path, f"larger than {MAX_TOKENIZER_BYTES} bytes; not a tokenizer.json")
    raw = path.read_bytes()
    try:
        tokenizer = tk.Tokenizer.from_str(raw.decode("utf-8"))
    except Exception as exc:  # bad UTF-8, or the Rust side's bare Exception on a bad tokenizer.json
        raise DataFormatError(path, f"not a Hugging Face tokenizer.json: {str(exc)[:200]}") from None
    return _prepared(tokenizer), raw


def describe(tokenizer: Tokenizer, raw: bytes, eod_token: str, path: Path | None = None) -> TokenizerInfo:
    """sha256, vocabulary size and end-of-document id; the token must be one of the tokenizer's."""
    eod_id = tokenizer.token_to_id(eod_token)
    if eod_id is None:
        special = sorted(t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special)
        raise DataFormatError(path, f"has no token {eod_token!r} to end documents with; pass one of its "
                                    f"special tokens with --eod-token [prepare.eod_token]: {special[:20]}")
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    vocab_size = max(vocab.values()) + 1
    if vocab_size > MAX_VOCAB:
        raise DataFormatError(path, f"has {vocab_size} ids, more than a run takes ({MAX_VOCAB})")
    return TokenizerInfo(hashlib.sha256(raw).hexdigest(), len(raw), vocab_size, eod_id, eod_token)


def encode(tokenizer: Tokenizer, documents: Sequence[str], info: TokenizerInfo) -> list[np.ndarray]:
    """Each document's ids, without the end-of-document token (the shard writer adds it). Raises when an
    id falls outside the vocabulary or a document encodes to the end-of-document id (a tokenizer whose
    end token is an ordinary vocabulary entry), since either would corrupt the shards silently."""
    dtype = np.dtype("<u2") if info.dtype == "uint16" else np.dtype("<u4")
    out = []
    for i, encoding in enumerate(tokenizer.encode_batch_fast(list(documents), add_special_tokens=False)):
        ids = np.asarray(encoding.ids, dtype=np.int64)
        if ids.size and (int(ids.max()) >= info.vocab_size or int(ids.min()) < 0):
            raise DataFormatError(None, f"the tokenizer produced id {int(ids.max())} >= its vocabulary "
                                        f"size {info.vocab_size}")
        if ids.size and bool((ids == info.eod_id).any()):
            raise DataSettingError("eod_token", f"document {i} of a batch encodes to the end-of-document id "
                                                f"{info.eod_id} ({info.eod_token!r}); choose another token")
        out.append(ids.astype(dtype))
    return out
