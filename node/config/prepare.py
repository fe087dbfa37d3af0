"""The ``[prepare]`` section: how ``distro-node data prepare`` turns local text into a prepared dataset.

Not a run setting: a run names the result (data.json) by its sha256, so how it was made never enters the
run manifest. Here so that the defaults have one source (flag help reads them through ``config_default``)
and can be set in the config file or as ``DISTRO_NODE_PREPARE__*`` like any other setting. The held-out
fraction is ``run.data.eval_fraction``, shared with text and token files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from distro_node.node.config.section import Section, doc
from distro_node.node.data.data_manifest import MAX_VOCAB

# The largest shard a writer buffers in memory: 2**28 ids are 1 GiB at uint32.
MAX_SHARD_TOKENS = 1 << 28


@dataclass(frozen=True)
class PrepareConfig(Section):
    """Tokenizer training and sharding for ``distro-node data prepare``."""

    SECTION: ClassVar[str] = "prepare"

    vocab_size: int = field(
        default=32000,
        metadata=doc("vocabulary of a byte-level BPE tokenizer trained on the input when none is given (the "
                     "DisTrO report's 32000); it may come out smaller on little text, and a run's model "
                     "takes the tokenizer's size"),
    )
    eod_token: str = field(
        default="<|endoftext|>",
        metadata=doc("special token written after every document (a given tokenizer must have it)"),
    )
    text_field: str = field(
        default="text",
        metadata=doc("field of a JSON-lines record, or column of a Parquet file, that holds the document"),
    )
    shard_tokens: int = field(
        default=1 << 24,
        metadata=doc("token ids per shard file (the last one holds the rest): 32 MiB at uint16"),
    )

    def check(self) -> None:
        self._range("vocab_size", 257, MAX_VOCAB)
        self._range("shard_tokens", 1024, MAX_SHARD_TOKENS)
        for name in ("eod_token", "text_field"):
            if not getattr(self, name):
                raise self._fail(name, "must not be empty")
