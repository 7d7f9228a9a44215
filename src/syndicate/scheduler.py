"""The names that jobs stored by earlier versions were pickled with: the job store keeps
``syndicate.scheduler:fire`` and the trigger's class by these paths. The scheduler itself is
``schedule.scheduler``."""

from .schedule.scheduler import WallClockCronTrigger, fire

__all__ = ["WallClockCronTrigger", "fire"]
