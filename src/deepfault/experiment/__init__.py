"""The experiment engine: methods, presets, executors, the results store, statistics, reports."""
