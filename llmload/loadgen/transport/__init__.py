"""The HTTP path's contact with geventhttpclient's and gevent's private internals: all of it is in
`ghc_adapter`, whose contract test (`tests/unit/test_ghc_adapter_contract.py`) checks every
private name it relies on against the installed releases."""
