"""syndicate: multilingual Atom/RSS feeds and audience newsletters from plain-text articles."""

__version__ = "0.1.0"
