//! TODO: cpu_util (placeholder created with the workspace skeleton).
