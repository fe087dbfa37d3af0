"""libp2p networking: host, announcements, payload streams, rounds, membership. Knows payloads as bytes."""
