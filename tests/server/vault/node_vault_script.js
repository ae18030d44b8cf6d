// One node-vault script, run by test_node_vault.py against OpenBao and against Strongroom: every
// step's outcome (status, the answer's keys, and the values that must agree) as one JSON line.
// Settings from the environment: VAULT_ADDR, VAULT_TOKEN, VAULT_CACERT (absent for plain HTTP).
"use strict";
const fs = require("fs");
const prefix = process.env.NODE_VAULT_PREFIX || "";
const base = { apiVersion: "v1", endpoint: process.env.VAULT_ADDR, token: process.env.VAULT_TOKEN };
if (process.env.VAULT_CACERT) base.requestOptions = { ca: fs.readFileSync(process.env.VAULT_CACERT) };
const vault = require(prefix + "node-vault")(base);
const getVerbs = require(prefix + "node-vault")({ ...base, noCustomHTTPVerbs: true });

const out = [];
const sorted = (o) => (o && typeof o === "object" && !Array.isArray(o) ? Object.keys(o).sort() : null);

async function step(name, fn, view) {
  try {
    const r = await fn();
    out.push({ name, status: 200, keys: sorted(r), dataKeys: sorted(r && r.data), value: view ? view(r) : null });
    return r;
  } catch (e) {
    const status = e.response ? e.response.statusCode : -1;
    out.push({ name, status, keys: null, dataKeys: null, value: null });
    return null;
  }
}

(async () => {
  await step("status", () => vault.status(), (r) => [r.type, r.initialized, r.sealed, r.t, r.n]);
  await step("initialized", () => vault.initialized(), (r) => r.initialized);
  await step("leader", () => vault.leader(), (r) => r.ha_enabled);
  await step("health", () => vault.health(), (r) => [r.initialized, r.sealed, r.standby]);
  await step("kv write", () => vault.write("secret/data/node/a", { data: { k: "v" } }), (r) => r.data.version);
  await step("kv write b", () => vault.write("secret/data/node/b", { data: { k: "w" } }), (r) => r.data.version);
  await step("kv read", () => vault.read("secret/data/node/a"), (r) => [r.data.data, r.data.metadata.version]);
  await step("kv list (LIST)", () => vault.list("secret/metadata/node"), (r) => r.data.keys);
  await step("kv list (?list=1)", () => getVerbs.list("secret/metadata/node"), (r) => r.data.keys);
  await step("kv list trailing slash", () => vault.list("secret/metadata/node/"), (r) => r.data.keys);
  await step("kv read missing", () => vault.read("secret/data/node/none"));
  await step("kv delete", () => vault.delete("secret/data/node/b"));
  await step("kv read deleted", () => vault.read("secret/data/node/b"));
  await step("transit create", () => vault.transitCreateKey({ name: "nodekey" }));
  const enc = await step(
    "transit encrypt",
    () => vault.encryptData({ name: "nodekey", plaintext: Buffer.from("attack at dawn").toString("base64") }),
    (r) => r.data.ciphertext.startsWith("vault:v1:"),
  );
  if (enc) {
    await step("transit decrypt", () => vault.decryptData({ name: "nodekey", ciphertext: enc.data.ciphertext }), (r) =>
      Buffer.from(r.data.plaintext, "base64").toString(),
    );
  }
  await step("transit list", () => vault.transitListKeys(), (r) => r.data.keys.includes("nodekey"));
  await step("transit read", () => vault.transitReadKey({ name: "nodekey" }), (r) => [r.data.type, r.data.latest_version]);
  const child = await step(
    "token create",
    () => vault.tokenCreate({ policies: ["default"], ttl: "1h" }),
    (r) => [r.auth.policies, r.auth.lease_duration, r.auth.renewable],
  );
  await step("token lookup-self", () => vault.tokenLookupSelf(), (r) => r.data.policies);
  vault.token = process.env.VAULT_TOKEN; // node-vault acts as the token it just created: back to the root token
  if (child) {
    const token = child.auth.client_token;
    const accessor = child.auth.accessor;
    await step("token lookup", () => vault.tokenLookup({ token }), (r) => [r.data.policies, r.data.ttl > 3590]);
    await step("token lookup-accessor", () => vault.tokenLookupAccessor({ accessor }), (r) => [r.data.id, r.data.accessor === accessor]);
    await step("token renew", () => vault.tokenRenew({ token, increment: "2h" }), (r) => r.auth.lease_duration);
    vault.token = process.env.VAULT_TOKEN; // likewise after a renewal
    await step("token accessors", () => vault.tokenAccessors(), (r) => r.data.keys.includes(accessor));
    await step("token revoke", () => vault.tokenRevoke({ token }));
    await step("token lookup revoked", () => vault.tokenLookup({ token }));
  }
  await step("policies", () => vault.policies(), (r) => r.policies.includes("default"));
  await step("mounts", () => vault.mounts(), (r) => ["secret/", "transit/", "sys/"].every((m) => m in r.data));
  process.stdout.write(JSON.stringify(out) + "\n");
})();
