"""`distro-node data prepare INPUT... --out DIR`: local documents -> tokenizer, token shards, data.json.

The result is what a founder trains on (``join --data-kind shards --data-path DIR``): the run manifest names
its data.json by sha256 and its tokenizer by sha256, and the model takes the tokenizer's vocabulary size.
Defaults come from the config's ``[prepare]`` table and ``run.data.eval_fraction`` (file <
``DISTRO_NODE_*`` < flags, like every command), so each flag's help names its field.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from distro_node.node.cli.common import UsageError, config_help, config_path
from distro_node.node.config.load import NodeConfig, load_config
from distro_node.node.data.data_manifest import MANIFEST_NAME
from distro_node.node.data.prepare import PrepareResult, PrepareSettings, prepare
from distro_node.node.data.shards import file_sha256


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "data",
        help="prepare training data: tokenizer and token shards from local text",
        description="Work with training data. `distro-node data prepare --help` for the one subcommand.",
    )
    data_sub = p.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)
    q = data_sub.add_parser(
        "prepare",
        help="turn local text, JSON lines or Parquet into a tokenizer, token shards and data.json",
        description=(
            "Read documents from INPUT files or folders (walked recursively, sorted): a text file is one "
            "document; .jsonl/.ndjson/.json are JSON lines, one document per record's --text-field; "
            ".parquet gives one document per row of the --text-field column (needs pyarrow). Trains a "
            "byte-level BPE tokenizer on them, offline, unless --tokenizer gives a tokenizer.json, then "
            "writes into --out: tokenizer.json, train-NNNNN.u16/.u32 and heldout-NNNNN.u16/.u32 (raw "
            "little-endian ids, each document followed by the end-of-document token, fixed-size shards) "
            "and data.json, the manifest naming every file by sha256. A document is held out when the "
            "sha256 of its text falls below --eval-fraction: the same split on every machine. Train on it "
            "with `distro-node join --data-kind shards --data-path DIR`; the model then takes the "
            "tokenizer's vocabulary size instead of its preset's. Needs the `data` extra: "
            "pip install 'distro-node[data]'."
        ),
    )
    q.add_argument("inputs", nargs="+", type=Path, metavar="INPUT", help="text, JSON-lines or Parquet file, "
                   "or a folder of them")
    q.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="folder to write the prepared dataset into (created)")
    q.add_argument("--tokenizer", type=Path, default=None, metavar="PATH",
                   help="use this Hugging Face tokenizer.json (copied into DIR) instead of training one")
    q.add_argument("--vocab-size", type=int, default=None, metavar="N",
                   help=config_help("vocabulary of the trained tokenizer", "prepare.vocab_size"))
    q.add_argument("--eod-token", default=None, metavar="TEXT",
                   help=config_help("end-of-document special token", "prepare.eod_token"))
    q.add_argument("--text-field", default=None, metavar="NAME",
                   help=config_help("JSON-lines field or Parquet column holding the text",
                                    "prepare.text_field"))
    q.add_argument("--eval-fraction", type=float, default=None, metavar="F",
                   help=config_help("fraction of documents held out for evaluation",
                                    "run.data.eval_fraction"))
    q.add_argument("--shard-tokens", type=int, default=None, metavar="N",
                   help=config_help("token ids per shard file", "prepare.shard_tokens"))
    q.add_argument("--config", type=Path, default=None, metavar="PATH",
                   help="config file (default $DISTRO_NODE_CONFIG, else ./distro-node.toml if present)")
    q.add_argument("--force", action="store_true", help=f"replace a prepared dataset already in DIR "
                                                         f"({MANIFEST_NAME})")
    q.add_argument("--no-progress", action="store_true",
                   help="no progress bar (it is drawn on stderr only when stderr is a terminal)")
    q.set_defaults(func=run_prepare)


def settings_from_args(args: argparse.Namespace) -> PrepareSettings:
    """The config's layers plus these flags, validated (a bad value names its field)."""
    flags: dict[str, object] = {
        "prepare.vocab_size": args.vocab_size,
        "prepare.eod_token": args.eod_token,
        "prepare.text_field": args.text_field,
        "prepare.shard_tokens": args.shard_tokens,
        "run.data.eval_fraction": args.eval_fraction,
    }
    config: NodeConfig = load_config(config_path(args.config), env=os.environ, flags=flags)
    p = config.prepare
    return PrepareSettings(vocab_size=p.vocab_size, eod_token=p.eod_token, text_field=p.text_field,
                           eval_fraction=config.run.data.eval_fraction, shard_tokens=p.shard_tokens)


def summary(result: PrepareResult) -> str:
    m = result.manifest
    t = m.tokenizer
    tokens = m.train.tokens + m.heldout.tokens
    rate = tokens / result.seconds if result.seconds > 0 else 0.0
    made = "trained" if result.trained_tokenizer else "given"
    lines = [
        f"wrote {result.path}",
        f"  tokenizer  {made}, vocab {t.vocab_size:,}, end-of-document {t.eod_token!r} = id {t.eod_id}, "
        f"sha256 {t.sha256}",
        f"  train      {m.train.documents:,} documents, {m.train.tokens:,} tokens in {len(m.train.shards)} "
        f"{m.dtype} shard(s)",
        f"  held out   {m.heldout.documents:,} documents, {m.heldout.tokens:,} tokens in "
        f"{len(m.heldout.shards)} shard(s) (eval_fraction {m.eval_fraction:g})",
        f"  input      {result.input_files:,} file(s), {result.input_bytes:,} bytes"
        + (f", {result.skipped_documents:,} empty document(s) skipped" if result.skipped_documents else ""),
        "  windows    train tokens in documents long enough for one (windows never cross documents): "
        + ", ".join(f"{share:.0%} at seq_len {n}" for n, share in result.coverage.items()),
        f"  time       {result.seconds:.1f} s ({rate:,.0f} tokens/s)",
        f"data.json sha256 {file_sha256(result.path)}",
        f"next: distro-node join --data-kind shards --data-path {result.path.parent}",
    ]
    return "\n".join(lines)


def run_prepare(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    if (args.out / MANIFEST_NAME).exists() and not args.force:
        raise UsageError("--out", f"{args.out} already holds a prepared dataset ({MANIFEST_NAME}); pass "
                                  "--force to replace it")
    if args.out.exists() and not args.out.is_dir():
        raise UsageError("--out", f"{args.out} exists and is not a folder")
    result = prepare(args.inputs, args.out, settings, tokenizer_path=args.tokenizer,
                     progress=False if args.no_progress else None)
    print(summary(result))
    return 0
