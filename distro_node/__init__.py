"""distro-node: peer-to-peer training with DisTrO-compressed updates.

The code lives in four subpackages mapped from the repository's top-level folders:
``optimizer``, ``compression``, ``protocol`` and ``node``.
"""

__version__ = "0.1.0"
