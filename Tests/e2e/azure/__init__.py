"""Azure Blob Storage + Planetary Computer SAS token endpoint test servers (see README.md)."""
from .server import BlobStore, SASTokenService, make_sas, signature, string_to_sign  # noqa: F401
