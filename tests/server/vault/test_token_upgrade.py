"""A database made before tokens kept their explicit_max_ttl: the server adds the column at start,
and the tokens already issued keep working and report none asked (0), on both databases."""

from __future__ import annotations

import httpx

from strongroom.server import storage
from tests.serverproc import Deployment


def test_tokens_of_an_earlier_schema_survive_the_upgrade(deployment: Deployment) -> None:
    s = deployment.start()
    host = deployment.register("upgrading")
    token = host.vault_token(policies=["root"], ttl="1h")["client_token"]
    s.stop()
    store = storage.Store(deployment.db_url)
    try:
        with store.exclusive() as tx:
            tx.run("ALTER TABLE vault_tokens DROP COLUMN explicit_max_ttl")  # as an earlier version made it
            tx.run("DELETE FROM meta WHERE key = 'schema_version'")  # nor a recorded schema version
    finally:
        store.dispose()
    s2 = deployment.start()
    with httpx.Client(verify=str(deployment.data.ca_file)) as http:
        r = http.get(s2.url + "/v1/auth/token/lookup-self", headers={"X-Vault-Token": token})
        assert r.status_code == 200, r.text
        assert r.json()["data"]["explicit_max_ttl"] == 0
        made = http.post(
            s2.url + "/v1/auth/token/create", headers={"X-Vault-Token": token}, json={"explicit_max_ttl": "2h", "ttl": "1h"}
        )
        assert made.status_code == 200, made.text
        child = made.json()["auth"]["client_token"]
        looked = http.get(s2.url + "/v1/auth/token/lookup-self", headers={"X-Vault-Token": child}).json()["data"]
        assert looked["explicit_max_ttl"] == 7200
