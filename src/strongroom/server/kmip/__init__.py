"""KMIP (OASIS, TTLV over TLS): the frames are read here within bounds before any decoder sees
them (frames.py)."""
