//! TODO: schedutil (placeholder created with the workspace skeleton).
