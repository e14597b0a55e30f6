"""The sign-in throttle's counters, one row per client address (and username, for
password sign-ins) that failed recently: shared by every web process, and counted by one
atomic statement, so failures racing each other are all counted (``surfaces.signin_throttle``)."""

from __future__ import annotations

from django.db import models


class SigninFailure(models.Model):
    # sha256 of (kind, casefolded username, address): usernames are arbitrary user input
    key = models.CharField(max_length=64, primary_key=True)
    count = models.PositiveIntegerField()
    # the window opens at the first failure and ends here; an ended window counts from 1 again
    until = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name = "sign-in failure count"

    def __str__(self) -> str:
        return f"{self.count} failures until {self.until:%Y-%m-%d %H:%M:%S} UTC"
