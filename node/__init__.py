"""The daemon: CLI, config, model, data, trainer, checkpoints, metrics, local swarm launcher."""
