"""Training data: the embedded Markov corpus (offline, with an exact loss floor), local text and token files,
and the deterministic per-(run, step, peer) batch sampler shared by all of them."""

from distro_node.node.data.embedded import markov_source
from distro_node.node.data.errors import (
    DataError,
    DataFileNotFoundError,
    DataFormatError,
    DataSettingError,
    EmptyDataFileError,
    TokenRangeError,
)
from distro_node.node.data.files import (
    BYTE_VOCAB_SIZE,
    file_fingerprint,
    resolve_token_dtype,
    text_source,
    token_file_source,
)
from distro_node.node.data.markov import MarkovSpec
from distro_node.node.data.sampling import eval_batches, sample_batch
from distro_node.node.data.source import TokenSource

__all__ = [
    "BYTE_VOCAB_SIZE",
    "DataError",
    "DataFileNotFoundError",
    "DataFormatError",
    "DataSettingError",
    "EmptyDataFileError",
    "MarkovSpec",
    "TokenRangeError",
    "TokenSource",
    "eval_batches",
    "file_fingerprint",
    "markov_source",
    "resolve_token_dtype",
    "sample_batch",
    "text_source",
    "token_file_source",
]
