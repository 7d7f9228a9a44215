"""syndicate: multilingual Atom/RSS feeds and audience newsletters from plain-text articles."""

from . import compiled

__version__ = "0.1.0"

compiled.install()  # a module edited since the install runs from its source
