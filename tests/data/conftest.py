"""One prepared dataset for the whole folder: tokenizer training is the slow part, so it runs once.

Size: about 2 MB of text (~330k tokens at the trained 8k vocabulary), under the "few MB" of the acceptance
criterion, so the folder stays well inside its time budget on a busy 2-core machine; bench/data_prepare.py
measures larger inputs. Shards of 64k tokens make every split span several shards, so documents crossing a
shard boundary are exercised.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from distro_node.node.data.prepare import prepare
from shard_corpus import CORPUS_CHARS, SETTINGS, Prepared, documents, write_inputs


@pytest.fixture(scope="session")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    root = tmp_path_factory.mktemp("prepared")
    docs = documents(CORPUS_CHARS)
    inputs = write_inputs(root / "input", docs, text_files=40)
    result = prepare([root / "input"], root / "out", SETTINGS, progress=False)
    return Prepared(docs, inputs, result)


@pytest.fixture
def one_thread() -> Iterator[None]:
    # Small models on a shared 2-core machine: a second OpenMP thread only contends (as in tests/node).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
