"""Errors of :mod:`tempo.gmi`: bad layouts, unavailable backends, dead instances."""
from __future__ import annotations

from tempo.errors import TempoError


class GMIError(TempoError):
    """A bad GMI layout, strategy, backend or argument."""


class InstanceFailure(GMIError):
    """An instance died; the message names its id, role, device and exit cause."""
