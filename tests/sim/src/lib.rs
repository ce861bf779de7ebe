//! TODO: simulator (placeholder created with the workspace skeleton).
