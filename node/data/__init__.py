"""Training data: the embedded Markov corpus (offline, with an exact loss floor), local text and token files,
prepared datasets (token shards from ``distro-node data prepare``), and the deterministic per-(run, step,
peer) batch sampler shared by all of them."""

from distro_node.node.data.embedded import markov_source
from distro_node.node.data.errors import (
    DataError,
    DataFileNotFoundError,
    DataFormatError,
    DataManifestError,
    DataSettingError,
    EmptyDataFileError,
    MissingExtraError,
    ShardError,
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
from distro_node.node.data.shards import open_shards
from distro_node.node.data.source import TokenSource

__all__ = [
    "BYTE_VOCAB_SIZE",
    "DataError",
    "DataFileNotFoundError",
    "DataFormatError",
    "DataManifestError",
    "DataSettingError",
    "EmptyDataFileError",
    "MarkovSpec",
    "MissingExtraError",
    "ShardError",
    "TokenRangeError",
    "TokenSource",
    "eval_batches",
    "file_fingerprint",
    "markov_source",
    "open_shards",
    "resolve_token_dtype",
    "sample_batch",
    "text_source",
    "token_file_source",
]
