"""Transparent encryption: the volume format of docs/FORMAT.md, in layers.

keys (the KEK and the keys it wraps) -> content (headers and blocks) -> names -> config (the
volume's JSON and its key sources) -> standalone (files outside a volume).  Each module does one
of these and imports only the ones before it.
"""
