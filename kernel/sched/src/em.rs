//! TODO: em (placeholder created with the workspace skeleton).
