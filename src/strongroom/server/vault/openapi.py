"""An OpenAPI 3 description of the Vault-compatible routes, built from their table: served at
``sys/internal/specs/openapi`` (Vault's own path for it) and fuzzed by the tests.

Vault's LIST verb appears as GET with ``list=true``; a ``{path*}`` (the rest of a path) as one
path parameter."""

from __future__ import annotations

from typing import Any

from strongroom.server.vault.call import VaultRoute

# JSON Schema of the bodies, for the routes' tables (the fuzz tests use the description).
STR: dict[str, Any] = {"type": "string"}
INT: dict[str, Any] = {"type": "integer"}
BOOL: dict[str, Any] = {"type": "boolean"}
OBJ: dict[str, Any] = {"type": "object"}
STRS: dict[str, Any] = {"type": "array", "items": STR}


def describe(routes: list[VaultRoute]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for r in routes:
        template = "/v1/" + r.template.replace("{path*}", "{path}")
        params = [
            {"name": n, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
            for n in ("path", "name", "kind", "bytes", "source", "algorithm")
            if "{" + n in r.template
        ]
        ops = paths.setdefault(template, {})
        if r.method == "LIST":
            get = ops.setdefault("get", {"parameters": list(params), "responses": {"200": {"description": "ok"}}})
            required = all(rt.method == "LIST" for rt in routes if rt.template == r.template)
            get["parameters"].append(
                {"name": "list", "in": "query", "required": required, "schema": {"type": "string", "enum": ["true"]}}
            )
            continue
        op: dict[str, Any] = {
            "parameters": list(params),
            "responses": {"200": {"description": "ok"}, "204": {"description": "done"}},
        }
        if r.template == "secret/data/{path*}" and r.method == "GET":
            op["parameters"].append(
                {"name": "version", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 0}}
            )
        if r.body is not None:
            op["requestBody"] = {
                "required": False,
                "content": {"application/json": {"schema": {"type": "object", "properties": r.body}}},
            }
        method = {"POST": "post", "GET": "get", "PATCH": "patch", "DELETE": "delete"}[r.method]
        if method in ops:  # a LIST route made the GET first: keep its list parameter
            ops[method]["parameters"] = [p for p in ops[method]["parameters"] if p["in"] == "query"] + op["parameters"]
            ops[method]["parameters"] = list({p["name"]: p for p in ops[method]["parameters"]}.values())
            continue
        ops[method] = op
    return {
        "openapi": "3.0.3",
        "info": {"title": "Strongroom: the Vault-compatible API", "version": "1"},
        "components": {"securitySchemes": {"token": {"type": "apiKey", "in": "header", "name": "X-Vault-Token"}}},
        "security": [{"token": []}],
        "paths": paths,
    }
