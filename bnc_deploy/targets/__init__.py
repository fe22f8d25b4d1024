"""Device targets: checks of exported files against what a target can run (Edge TPU report, ...).

Every claim a target module makes says how it was checked (static, emulated, on the device).
"""
