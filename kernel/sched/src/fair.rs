//! TODO: fair (placeholder created with the workspace skeleton).
