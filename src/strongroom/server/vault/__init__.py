"""The Vault-compatible surface (docs/API.md, "Vault-compatible API"): tokens and ACL policies,
KV v2 over deposits, Transit and a few sys routes, on the same storage, barrier and audit chain."""
