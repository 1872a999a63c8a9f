from .server import OIDCProvider, ResourceServer  # noqa: F401
