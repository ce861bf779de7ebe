//! TODO: topology (placeholder created with the workspace skeleton).
