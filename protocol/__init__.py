"""libp2p networking (host, announcements, payload streams, membership) and, in consensus/, the pure round
machine it feeds. Knows payloads as bytes."""
