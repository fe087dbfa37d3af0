"""Consensus on what every honest replica aggregates each step: the pure round state machine.

No clock, no randomness, no I/O: the driver passes time in and carries out the returned actions, so every
rule can be tested, and replayed by the multi-replica simulator, without a network.
"""
