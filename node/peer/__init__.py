"""The networked training peer: one trio task per process driving libp2p, the round machine and a compute
worker thread. ``distro-node join`` (node/cli/join.py) is its command line."""
