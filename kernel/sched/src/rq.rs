//! TODO: rq (placeholder created with the workspace skeleton).
