"""A Kubernetes KMS v2 plugin (`strongroom kms-plugin`): the apiserver's envelope encryption of
secrets in etcd asks it, over a unix socket, to encrypt and decrypt its data-encryption keys;
the plugin does so with a transit key this host holds on the Strongroom server, so the key that
opens etcd's secrets never leaves the server (docs/OPERATIONS.md, "Kubernetes KMS v2").

The service is KMS v2's ``v2.KeyManagementService`` (Status, Encrypt, Decrypt); its messages are
built here from their descriptors (field numbers as in k8s.io/kms/apis/v2/api.proto), so no
generated code is kept.  ``key_id`` names the transit key's version
(``strongroom/NAME/vN``): a rotation of the transit key shows in Status, and the apiserver
re-encrypts with it.  An outage of the server shows as an unhealthy Status and UNAVAILABLE answers;
ciphertexts made before it decrypt again once it is back.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from strongroom.client import errors

log = logging.getLogger("strongroom.kms")

SERVICE = "v2.KeyManagementService"
MAX_PLAINTEXT = 1024  # a DEK (KMS v2 sends 32 bytes)
MAX_CIPHERTEXT = 1024  # the apiserver's own bound on what a plugin returns
_CIPHERTEXT = re.compile(r"vault:v([0-9]{1,9}):[A-Za-z0-9+/=]{1,2000}")


def _descriptor() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="strongroom/kms_v2.proto", package="v2", syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto

    def message(name: str, *fields: tuple[str, int, int, str | None], maps: tuple[str, ...] = ()) -> None:
        m = f.message_type.add(name=name)
        for fname, number, ftype, type_name in fields:
            label = T.LABEL_REPEATED if fname in maps else T.LABEL_OPTIONAL
            fd = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                fd.type_name = type_name
        for fname in maps:
            entry = m.nested_type.add(name="AnnotationsEntry")
            entry.field.add(name="key", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
            entry.field.add(name="value", number=2, type=T.TYPE_BYTES, label=T.LABEL_OPTIONAL)
            entry.options.map_entry = True
            assert fname == "annotations"

    message("StatusRequest")
    string = T.TYPE_STRING
    message("StatusResponse", ("version", 1, string, None), ("healthz", 2, string, None), ("key_id", 3, string, None))
    entry = ".v2.{}.AnnotationsEntry"
    message(
        "DecryptRequest",
        ("ciphertext", 1, T.TYPE_BYTES, None),
        ("uid", 2, T.TYPE_STRING, None),
        ("key_id", 3, T.TYPE_STRING, None),
        ("annotations", 4, T.TYPE_MESSAGE, entry.format("DecryptRequest")),
        maps=("annotations",),
    )
    message("DecryptResponse", ("plaintext", 1, T.TYPE_BYTES, None))
    message("EncryptRequest", ("plaintext", 1, T.TYPE_BYTES, None), ("uid", 2, T.TYPE_STRING, None))
    message(
        "EncryptResponse",
        ("ciphertext", 1, T.TYPE_BYTES, None),
        ("key_id", 2, T.TYPE_STRING, None),
        ("annotations", 3, T.TYPE_MESSAGE, entry.format("EncryptResponse")),
        maps=("annotations",),
    )
    return f


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_descriptor())
M = {name: message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"v2.{name}")) for name in (
    "StatusRequest", "StatusResponse", "DecryptRequest", "DecryptResponse", "EncryptRequest", "EncryptResponse")}  # fmt: skip


class Plugin:
    """The three calls, against a transit key of the client's."""

    def __init__(self, client: Any, key: str) -> None:
        self.client = client
        self.key = key
        self._lock = threading.Lock()  # one client connection: one call at a time
        self.last_key_id = ""

    def _key_id(self, version: int) -> str:
        return f"strongroom/{self.key}/v{version}"

    def _call(self, context: Any, fn: Any, *args: Any) -> Any:
        try:
            with self._lock:
                return fn(*args)
        except (errors.Unavailable, errors.Sealed) as e:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"the key server is unavailable: {e}")
        except errors.StrongroomError as e:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"the key server refused: {e}")

    def status(self, request: Any, context: Any) -> Any:
        try:
            with self._lock:
                info = self.client.transit_key(self.key)
            self.last_key_id = self._key_id(int(info["latest_version"]))
            healthz = "ok"
        except errors.StrongroomError as e:
            healthz = f"the key server cannot be used: {type(e).__name__}"
        return M["StatusResponse"](version="v2", healthz=healthz, key_id=self.last_key_id or "unknown")

    def encrypt(self, request: Any, context: Any) -> Any:
        if not 0 < len(request.plaintext) <= MAX_PLAINTEXT:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"plaintext must be 1 to {MAX_PLAINTEXT} bytes")
        ciphertext = str(self._call(context, self.client.transit_encrypt, self.key, bytes(request.plaintext)))
        m = _CIPHERTEXT.fullmatch(ciphertext)
        if m is None or len(ciphertext) > MAX_CIPHERTEXT:
            context.abort(grpc.StatusCode.INTERNAL, "the key server's ciphertext is not one this plugin can hand on")
        assert m is not None
        return M["EncryptResponse"](ciphertext=ciphertext.encode(), key_id=self._key_id(int(m.group(1))))

    def decrypt(self, request: Any, context: Any) -> Any:
        text = bytes(request.ciphertext).decode("ascii", "replace")
        m = _CIPHERTEXT.fullmatch(text)
        if m is None or len(text) > MAX_CIPHERTEXT:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "not a ciphertext this plugin made")
        if request.key_id and not request.key_id.startswith(f"strongroom/{self.key}/v"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"key_id {request.key_id[:100]!r} is not this plugin's key")
        plaintext = self._call(context, self.client.transit_decrypt, self.key, text)
        return M["DecryptResponse"](plaintext=plaintext)


def serve(plugin: Plugin, socket_path: Path, ready: Any = None) -> grpc.Server:
    """Listen on ``socket_path`` (mode 0600; a stale socket file is replaced); returns the
    started server (``wait_for_termination`` to block)."""

    def handler(fn: Any, name: str) -> Any:
        request, response = M[f"{name}Request"], M[f"{name}Response"]
        return grpc.unary_unary_rpc_method_handler(fn, request.FromString, response.SerializeToString)

    handlers = {
        "Status": handler(plugin.status, "Status"),
        "Encrypt": handler(plugin.encrypt, "Encrypt"),
        "Decrypt": handler(plugin.decrypt, "Decrypt"),
    }
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4),
        options=[("grpc.max_receive_message_length", 64 << 10), ("grpc.max_send_message_length", 64 << 10)],
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    if socket_path.is_socket():
        socket_path.unlink()
    old = os.umask(0o177)
    try:
        server.add_insecure_port(f"unix://{socket_path.resolve()}")
        server.start()
    finally:
        os.umask(old)
    os.chmod(socket_path, 0o600)
    return server
