"""I/O to Kubernetes API servers: a thin async client and resource paths."""
