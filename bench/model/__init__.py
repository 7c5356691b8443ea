"""The model layer: what a run costs on given hardware, and the fits that read those costs back.

    inputs (plain)                 the one cost model              on top
    hardware profile  hwprofile -> costmodel (decode, prefill, -> emulator/ (the RL loop's events)
      (or the datasheet)             train, sync, hand-off,       -> calibrate, predict, plan
    framework profile fwprofile ->   teachers: seconds of work)     (thin commands)
    workload shape    (config)  ->

    fits, the inverses of the same cost model:
      probe fit   hwprofile.fit       probe rows       -> hardware profile
      calibrate   calibration         one run's trace  -> that run's inputs (calibrate_fit: each fit)
      profile fit fwprofile.fit_runs  runs of one framework -> framework profile
    inputs.prediction_inputs: the source run's shape + the target's profile + the user's key=value

Modules here import no command and nothing of bench/emulator (tests/test_architecture.py): the
emulator and the commands stand on this layer, never the reverse.
"""
