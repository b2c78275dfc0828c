"""A token bucket, for everything one client may make the server do: seconds of audio, typed characters, events,
bytes read from its socket."""

from __future__ import annotations


class RateBudget:
    """A token bucket: `rate` units a second after a burst of `burst` (seconds of audio, typed requests). The work
    behind an inbound event costs far more than the event: the budget bounds what one client can make the shared
    workers do, whatever its transport."""

    def __init__(self, rate: float, burst: float, now: float = 0.0):
        self.rate, self.burst = rate, burst
        self.left, self.at = burst, now
        self.cooling = False

    def available(self, now: float) -> float:
        self.left = min(self.burst, self.left + max(0.0, now - self.at) * self.rate)
        self.at = now
        return self.left

    def take(self, units: float, now: float) -> bool:
        """Spend `units`; False (and nothing spent) when the budget is out: refuse the input."""
        if units > self.available(now):
            self.cooling = True
            return False
        self.left -= units
        return True

    def admit(self, units: float, now: float) -> bool:
        """`take`, except that more than a whole burst (a recorded clip, a long prompt, sent at once as a Realtime
        client may) is taken from a full budget and paid off at `rate` before anything more is taken: the same
        average rate, without refusing for good what is too big to fit the burst."""
        if units <= self.burst:
            return self.take(units, now)
        if self.available(now) < self.burst:
            self.cooling = True
            return False
        self.left -= units
        return True

    def spend(self, units: float, now: float) -> float:
        """Spend `units` even past the budget; the seconds until the debt is paid (0 when within it)."""
        self.left = self.available(now) - units
        return max(0.0, -self.left / self.rate)

    def open(self, now: float) -> bool:
        """Whether to look at input at all: after a refusal, not until half the burst is back. A flood is then
        refused before it costs any parsing, instead of each message being parsed to find it is over."""
        if self.cooling and self.available(now) >= self.burst / 2:
            self.cooling = False
        return not self.cooling
