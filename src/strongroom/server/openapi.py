"""The deposit API's OpenAPI 3.1 document, made from the route table (routes.py): paths, path and
query parameters with their bounds, bodies as their models' JSON Schema, success statuses.
Served at ``/openapi.json``; the fuzz tests drive every route from it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from strongroom.server import routes as r

_ERROR = {
    "description": "an error",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
                "required": ["error", "message"],
            }
        }
    },
}


def describe(table: tuple[r.Route, ...]) -> dict[str, Any]:
    models: list[type[BaseModel]] = sorted({t.body for t in table if t.body is not None}, key=lambda c: c.__name__)
    refs, defs = models_json_schema([(c, "validation") for c in models], ref_template="#/components/schemas/{model}")
    paths: dict[str, dict[str, Any]] = {}
    for route in table:
        params: list[dict[str, Any]] = []
        for segment in route.path.split("/"):
            if segment.startswith("{"):
                name = segment[1:-1]
                schema: dict[str, Any] = {"type": "string", "minLength": 1}
                if name in route.choices:
                    schema = {"type": "string", "enum": list(route.choices[name])}
                params.append({"name": name, "in": "path", "required": True, "schema": schema})
        for q in route.query:
            params.append({"name": q.name, "in": "query", "required": q.required, "schema": q.schema()})
        op: dict[str, Any] = {
            "operationId": f"{route.method.lower()}{route.path.replace('/', '_').replace('{', '').replace('}', '')}",
            "parameters": params,
            "responses": {str(route.status): {"description": "done"}, "4XX": _ERROR},
        }
        if route.body is not None:
            op["requestBody"] = {"required": True, "content": {"application/json": {"schema": refs[(route.body, "validation")]}}}
        if route is r.ENTROPY:
            op["responses"]["200"] = {"description": "N random bytes", "content": {"application/octet-stream": {}}}
        if route is not r.HEALTH and route is not r.REGISTER:
            op["security"] = [{"signature": []}]
        paths.setdefault(route.path, {})[route.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Strongroom key trustee",
            "version": "1",
            "description": "Deposits, policy, entropy and audit. Every /v1 route except /v1/register is signed: see docs/API.md.",
        },
        "components": {
            "schemas": defs.get("$defs", {}),
            "securitySchemes": {"signature": {"type": "apiKey", "in": "header", "name": "X-Strongroom-Signature"}},
        },
        "paths": paths,
    }
