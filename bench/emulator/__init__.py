"""Discrete-event emulator of the RL loop: generator -> environment -> queue -> trainer -> weight sync.

The embedded default when no GPUs exist; every figure it produces is stamped `emulated`.
Entry points: `bench.emulator.run.emulate(cfg, run_dir)` and `python -m bench emulate`.
"""
