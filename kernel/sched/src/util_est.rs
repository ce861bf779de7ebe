//! TODO: util_est (placeholder created with the workspace skeleton).
