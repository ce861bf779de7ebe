//! TODO: features (placeholder created with the workspace skeleton).
