"""Fixtures of the parent-proxy rig for tests in this directory (see fixtures.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from parents.fixtures import *  # noqa: E402,F401,F403
