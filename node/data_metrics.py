"""Prometheus metrics of a node's training data on the swarm: shards held and fetched, bytes moved, servers
whose bytes failed their hash, and how far through the data the node is (epochs).

On the node's own registry (node/metrics.py rules: ``distro_`` prefix, base units, no peer id as a label).
Why epochs here: the tokens a node trained on are already counted (``distro_tokens_total``); divided by the
train split's token count they say whether the run has begun repeating its data.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

PREFIX = "distro"


class DataMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self._cached = Gauge(f"{PREFIX}_data_shards_cached", "Train shards this node holds verified",
                             registry=r)
        self._shards = Gauge(f"{PREFIX}_data_shards", "Train shards of the run's prepared dataset",
                             registry=r)
        self._fetched = Counter(f"{PREFIX}_data_shards_fetched", "Shards fetched from peers and verified",
                                registry=r)
        self._bytes = Counter(f"{PREFIX}_data_bytes_fetched", "Bytes of data files fetched from peers",
                              registry=r)
        self._evicted = Counter(f"{PREFIX}_data_shards_evicted", "Shards dropped from the cache for room",
                                registry=r)
        self._faulty = Counter(f"{PREFIX}_blob_faulty", "Fetches in which a peer served bytes that failed "
                               "the file's sha256 (rejected, fetched from another)", registry=r)
        self._wait = Counter(f"{PREFIX}_data_wait_seconds", "Seconds training waited for shards", registry=r)
        self._epoch = Gauge(f"{PREFIX}_data_epoch", "Tokens this node trained on / tokens in the train split",
                            registry=r)
        self._served = Gauge(f"{PREFIX}_blob_served_bytes", "Bytes of data files this node served to peers",
                             registry=r)
        self._train_tokens = 0

    def dataset(self, shards: int, train_tokens: int) -> None:
        self._shards.set(shards)
        self._train_tokens = train_tokens

    def cached(self, count: int) -> None:
        self._cached.set(count)

    def fetched(self, size: int, shard: bool) -> None:
        self._bytes.inc(size)
        if shard:
            self._fetched.inc()

    def evicted(self, count: int) -> None:
        self._evicted.inc(count)

    def faulty(self, count: int) -> None:
        self._faulty.inc(count)

    def waited(self, seconds: float) -> None:
        self._wait.inc(max(0.0, seconds))

    def tokens_seen(self, tokens: int) -> None:
        if self._train_tokens:
            self._epoch.set(tokens / self._train_tokens)

    def served_from(self, read: Callable[[], int]) -> None:
        self._served.set_function(lambda: float(read()))


__all__ = ["DataMetrics"]
