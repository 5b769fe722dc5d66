"""Time: the zone the model reads dates in, and dates in the caller's words.

Stored times are always UTC instants (seconds since the epoch); only what the model
reads is local.
"""

from __future__ import annotations

import calendar
import contextlib
import logging
import os
import re
import time
from datetime import datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

logger = logging.getLogger("memory")


TIMEZONE_SETTING = "MEMORY_TIMEZONE"
"""The environment variable naming the zone the model reads dates in: an IANA name
such as "America/Los_Angeles". Unset or "localtime": the machine's own zone (TZ,
/etc/localtime).
Stored times are always UTC instants (seconds since the epoch); only what the model
reads is local, so a call at 20:30 on 29 November in Los Angeles is "2026-11-29"."""


def deployment_zone() -> tzinfo:
    """The zone dates are shown in (``TIMEZONE_SETTING``). Raises ValueError naming
    the variable when it holds a name the time zone database does not know."""
    name = os.getenv(TIMEZONE_SETTING, "").strip()
    if name and name != "localtime":  # (the machine's zone, found by its name below)
        try:
            return ZoneInfo(name)
        # OSError: with the tzdata package installed, a folder ("America") is opened
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise ValueError(
                f"{TIMEZONE_SETTING}={name!r} is not a time zone name such as America/Los_Angeles"
            ) from None
    link = os.path.realpath("/etc/localtime")
    rule = os.getenv("TZ", "").lstrip(":")
    for candidate in (rule, link.partition("zoneinfo/")[2]):
        with contextlib.suppress(ZoneInfoNotFoundError, ValueError, OSError):
            if candidate:
                return ZoneInfo(candidate)
        if rule:  # a POSIX rule ("EST5EDT,M3.2.0,M11.1.0"): the C library reads it
            break
    return MachineZone()


class MachineZone(tzinfo):
    """The machine's zone as the C library reads it (``time.localtime``): for a TZ
    that is a POSIX rule with no IANA name, such as ``EST5EDT,M3.2.0,M11.1.0``
    (POSIX.1-2017, 8.3 "TZ"), each instant gets the offset and abbreviation the
    machine's own clock shows, summer time included."""

    def _at(self, dt: datetime | None) -> time.struct_time:
        if dt is None:
            return time.localtime()
        wall = dt.replace(tzinfo=None).timetuple()
        return time.localtime(time.mktime((*wall[:8], -1)))

    def utcoffset(self, dt: datetime | None) -> timedelta:
        return timedelta(seconds=self._at(dt).tm_gmtoff)

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None

    def tzname(self, dt: datetime | None) -> str:
        return self._at(dt).tm_zone

    def fromutc(self, dt: datetime) -> datetime:
        at = calendar.timegm(dt.utctimetuple())
        return dt + timedelta(seconds=time.localtime(at).tm_gmtoff)


UTC_KEYS = frozenset(
    {
        "UTC",
        "Etc/UTC",
        "Etc/UCT",
        "UCT",
        "Etc/Universal",
        "Universal",
        "Etc/Zulu",
        "Zulu",
    }
)
"""The IANA names of UTC itself; a container's /etc/localtime usually links to Etc/UTC."""


def zone_name(zone: tzinfo) -> str:
    """How the model reads a zone's name: its IANA key ("America/Los_Angeles"), "UTC"
    for UTC under any of its names (``UTC_KEYS``), a fixed offset by its sign as read
    ("Etc/GMT+5" is "UTC-5": POSIX inverts it), or its abbreviation when the
    machine's zone has no key."""
    name = getattr(zone, "key", None) or zone.tzname(None) or "UTC"
    fixed = re.fullmatch(r"Etc/GMT([+-])(\d+)", name)
    if fixed and int(fixed[2]):
        return f"UTC{'-' if fixed[1] == '+' else '+'}{int(fixed[2])}"
    return "UTC" if name in UTC_KEYS else name


def local_date(ts: float, zone: tzinfo | None = None, fmt: str = "%Y-%m-%d") -> str:
    """``ts`` (seconds since the epoch, UTC) as a date in ``zone`` (default
    ``deployment_zone()``), formatted with ``fmt`` (strftime; e.g. "%B %Y" gives
    "March 2026"); "an unknown date" for a time out of range."""
    try:
        return datetime.fromtimestamp(ts, zone or deployment_zone()).strftime(fmt)
    except (OverflowError, OSError, ValueError):
        return "an unknown date"


WEEKDAYS = (
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
)


def date_words(ts: float, zone: tzinfo | None = None) -> str:
    """The words a question may use for the day ``ts`` (seconds since the epoch) fell
    on in ``zone`` (default the deployment's zone, UTC when the setting is not a zone,
    as in the block), in English whatever the locale: "May 2023 8 Monday"; "" for a
    time out of range. Indexed with each turn, so "what did I say in May" finds May's
    calls."""
    try:
        d = datetime.fromtimestamp(ts, zone or zone_or_utc())
    except (OverflowError, OSError, ValueError):
        return ""
    return f"{MONTHS[d.month - 1]} {d.year} {d.day} {WEEKDAYS[d.weekday()]}"


MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def since(ts: float) -> str:
    """When a fact was learned, in the caller's terms: "since March 2026" (month and
    year in the deployment's zone; English whatever the locale), or "since an unknown
    date"."""
    return f"since {month(ts)}"


def month(ts: float, zone: tzinfo | None = None) -> str:
    """A time in seconds since the epoch as month and year in ``zone`` (default the
    deployment's zone, ``deployment_zone``; "March 2026"), or "an unknown date"."""
    try:
        t = datetime.fromtimestamp(ts, zone or zone_or_utc())
    except (OverflowError, OSError, ValueError):
        return "an unknown date"
    return f"{MONTHS[t.month - 1]} {t.year}"


def time_line(now: float, zone: tzinfo) -> str:
    """The block's last line: the current date and time, and the zone of its dates
    ("Now: Sunday, 29 November 2026, 20:30 America/Los_Angeles time; dates here are in
    the same zone."; UTC and offsets from it are "04:30 UTC", "23:30 UTC-5", not "UTC
    time")."""
    name = zone_name(zone)
    where = name if name.startswith("UTC") else f"{name} time"
    try:
        d = datetime.fromtimestamp(now, zone)
    except (OverflowError, OSError, ValueError):
        return f"Dates here are in {where}."
    return f"Now: {d:%A}, {d.day} {d:%B %Y}, {d:%H:%M} {where}; dates here are in the same zone."


def zone_or_utc() -> tzinfo:
    # A bad setting is logged once and the block says "UTC", so no date is wrong
    # without the model being told which zone it is in.
    try:
        return deployment_zone()
    except ValueError as exc:
        if not _zone_warned:
            _zone_warned.append(True)
            logger.error("memory: %s; dates are shown in UTC", exc)
        return ZoneInfo("UTC")


_zone_warned: list[bool] = []
