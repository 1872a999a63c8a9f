"""ArcGIS Enterprise / Portal test server for the authproxy end-to-end suite.

See ``server.py`` (module docstring) and ``README.md``.  Names are loaded
lazily so that ``python3 -m arcgis.server`` does not import the module twice.
"""

__all__ = ["ArcGISServer", "federate", "pkce_challenge", "ERROR_FORMS", "ESRI_QUERY_DOC",
           "ERR_498", "ERR_499", "ERR_403", "OOB_REDIRECT"]


def __getattr__(name):
    if name in __all__:
        from . import server
        return getattr(server, name)
    raise AttributeError(name)
