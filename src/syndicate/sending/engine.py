"""The engine choice (``send.engine``): the dispatcher that the command line and the schedule,
where the program is put together, hand in to ``issuing.send_due``. Only this module imports
the scale-out (``scale``), and only when the engine is procrastinate: nothing on the path of a
send imports it.
"""

from __future__ import annotations

from ..config import Config
from ..errors import ConfigError
from .dispatch import Dispatcher, LocalDispatcher


def dispatcher(config: Config) -> Dispatcher:
    """The dispatcher ``send.engine`` names."""
    if config.send.engine == "procrastinate":
        try:
            from .scale import ProcrastinateDispatcher  # the optional extra syndicate[scale]
        except ImportError as exc:
            reason = f"send.engine: procrastinate needs pip install 'syndicate[scale]' ({exc})"
            raise ConfigError("send.engine", [reason]) from None
        return ProcrastinateDispatcher(config)
    return LocalDispatcher()
