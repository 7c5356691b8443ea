"""Discrete-event emulator of the RL loop: generator -> environment -> queue -> trainer -> weight sync.

The embedded default when no GPUs exist; every figure it produces is stamped `emulated`.
Entry points: `bench.emulator.run.build(cfg, r)[0].run()` (the trace as rows and columns, no file
written), `bench.emulator.run.emulate_into(cfg, paths, r)` (writes trace/),
`bench.emulator.run.emulate(cfg, run_dir)` and `python -m bench emulate` (a whole run directory).
"""
