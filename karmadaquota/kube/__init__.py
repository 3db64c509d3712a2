"""I/O to Kubernetes API servers: a thin async client, resource paths, the one informer
(list + watch) and the one compare-and-swap retry."""
