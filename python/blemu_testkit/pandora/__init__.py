"""blemu-pandora: the Pandora test interfaces for blemu's programmable host (Docs/TEST-FRAMEWORKS.md).

Needs the kit's `pandora` extra (grpcio, bt-test-interfaces): `pip install './python[pandora]'`.
`datatypes` and `translate` are the proto translation tables, `host` the control socket side,
`server` the gRPC services and the `blemu-pandora` command.
"""
