//! TODO: pelt (placeholder created with the workspace skeleton).
