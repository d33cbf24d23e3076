"""jaccl-bench: nccl-tests style measurements of jax_jaccl against its peers."""
