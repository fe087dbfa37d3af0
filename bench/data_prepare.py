"""Throughput of `distro-node data prepare`: how many tokens per second a volunteer's machine turns into
shards, and how long a node takes to verify them before it trains.

Generated text (seeded pseudo-words in documents of 100 to 2000 words, as JSON lines) so any machine can
rerun it offline. Three timed phases, each on the same input:

* ``train_and_shard``: the whole command as a user runs it first, BPE training included (two passes);
* ``shard_only``: with that tokenizer given (``--tokenizer``): read, tokenize, write shards and data.json;
* ``open_verify``: ``open_shards``, what a node does at start: sha256, id range and end count of every shard.

Tokens per second are the shards' tokens over each phase's wall time. The tokenizers library encodes in
parallel on all cores unless ``--threads`` (RAYON_NUM_THREADS) limits it. Run it on a quiet machine.
Writes bench/results/data_prepare.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import RESULTS_DIR, write_json
from distro_node.node.config.prepare import PrepareConfig
from distro_node.node.config.run import DataConfig
from distro_node.node.data.prepare import PrepareSettings, prepare
from distro_node.node.data.shards import open_shards

SYLLABLES = ("ka", "to", "ri", "an", "el", "mo", "su", "ne", "la", "vi", "or", "qu", "pe", "di", "xa", "zu",
             "ba", "fo", "gi", "he", "ly", "ost", "um", "wer")


def write_corpus(folder: Path, megabytes: float, seed: int, files: int = 4) -> int:
    """JSON-lines files holding about ``megabytes`` MB of text; returns the bytes written."""
    rng = np.random.default_rng(seed)
    vocab_rng = np.random.default_rng(seed + 1)
    words = np.array(sorted({
        "".join(SYLLABLES[i] for i in vocab_rng.integers(0, len(SYLLABLES), vocab_rng.integers(1, 5)))
        for _ in range(60000)
    }))
    # Zipf-like word frequencies, as in natural text, so BPE has frequent and rare words to merge.
    weights = 1.0 / np.arange(1, words.shape[0] + 1)
    weights /= weights.sum()
    target = int(megabytes * 1e6)
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    handles = [(folder / f"part-{i}.jsonl").open("w", encoding="utf-8") for i in range(files)]
    try:
        n = 0
        while written < target:
            length = int(rng.integers(100, 2000))
            text = " ".join(words[rng.choice(words.shape[0], size=length, p=weights)]) + ".\n"
            line = json.dumps({"text": text}) + "\n"
            handles[n % files].write(line)
            written += len(line)
            n += 1
    finally:
        for h in handles:
            h.close()
    return written


def timed(label: str, fn: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    value = fn()
    seconds = time.perf_counter() - t0
    print(f"  {label}: {seconds:.1f} s", flush=True)
    return value, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    defaults = PrepareConfig()
    parser.add_argument("--megabytes", type=float, default=64.0, help="generated input text (default 64)")
    parser.add_argument("--vocab-size", type=int, default=defaults.vocab_size,
                        help=f"tokenizer vocabulary (default {defaults.vocab_size}, the config's)")
    parser.add_argument("--shard-tokens", type=int, default=defaults.shard_tokens,
                        help=f"tokens per shard (default {defaults.shard_tokens}, the config's)")
    parser.add_argument("--eval-fraction", type=float, default=DataConfig().eval_fraction,
                        help=f"held-out fraction (default {DataConfig().eval_fraction}, the config's)")
    parser.add_argument("--threads", type=int, default=None,
                        help="tokenizer threads (RAYON_NUM_THREADS; default: every core)")
    parser.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    parser.add_argument("--work-dir", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default: bench/results/)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        os.environ["RAYON_NUM_THREADS"] = str(args.threads)  # read when the tokenizers pool first starts
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench-data-prepare-"))
    settings = PrepareSettings(vocab_size=args.vocab_size, eod_token=defaults.eod_token,
                               text_field=defaults.text_field, eval_fraction=args.eval_fraction,
                               shard_tokens=args.shard_tokens)
    try:
        print(f"generating {args.megabytes:g} MB of text in {work}", flush=True)
        input_bytes = write_corpus(work / "input", args.megabytes, args.seed)
        first, t_full = timed("train_and_shard", lambda: prepare([work / "input"], work / "full", settings,
                                                                 progress=False))
        tokenizer = first.path.parent / "tokenizer.json"
        second, t_shard = timed("shard_only", lambda: prepare([work / "input"], work / "given", settings,
                                                              tokenizer_path=tokenizer, progress=False))
        source, t_open = timed("open_verify", lambda: open_shards(second.path))
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    m = second.manifest
    tokens = m.train.tokens + m.heldout.tokens
    assert source.train.tokens + source.eval.tokens == tokens
    results = {
        "input_bytes": input_bytes,
        "documents": m.train.documents + m.heldout.documents,
        "tokens": tokens,
        "bytes_per_token": input_bytes / tokens,
        "vocab_size": m.tokenizer.vocab_size,
        "dtype": m.dtype,
        "shards": len(m.train.shards) + len(m.heldout.shards),
        "shard_tokens": m.shard_tokens,
        "tokenizer_threads": args.threads,
        "seconds": {"train_and_shard": t_full, "shard_only": t_shard, "open_verify": t_open},
        "tokens_per_second": {"train_and_shard": tokens / t_full, "shard_only": tokens / t_shard,
                              "open_verify": tokens / t_open},
        "input_mb_per_second": {"train_and_shard": input_bytes / 1e6 / t_full,
                                "shard_only": input_bytes / 1e6 / t_shard},
    }
    rates = results["tokens_per_second"]
    print(f"{tokens:,} tokens ({results['bytes_per_token']:.2f} B/token, vocab {m.tokenizer.vocab_size}): "
          f"{rates['train_and_shard']:,.0f} tokens/s with training, {rates['shard_only']:,.0f} tokens/s "
          f"with a given tokenizer, {rates['open_verify']:,.0f} tokens/s verified at open")
    config = {"megabytes": args.megabytes, "seed": args.seed, "settings": settings.__dict__}
    path = write_json(args.out or RESULTS_DIR / "data_prepare.json", {"config": config, "results": results})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
