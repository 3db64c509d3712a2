"""What both programs serve with: the hardened listener (`server`), the health and metrics
port (`aux_port`), who may read /metrics (`metrics_auth`) and the serving certificate
(`certs`: its expiry, its reload)."""
