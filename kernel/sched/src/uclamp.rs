//! TODO: uclamp (placeholder created with the workspace skeleton).
