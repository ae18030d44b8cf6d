"""Small, named primitives over pyca/cryptography. No I/O lives here."""
