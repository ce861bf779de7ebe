//! TODO: cpufreq (placeholder created with the workspace skeleton).
