"""The study layer: experiment files, the one assembly step, the runner, sweeps, validation,
calibration and goldens (docs/architecture.md)."""
