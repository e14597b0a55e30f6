"""Server-rendered pages (see chukwa_site/pages.py)."""

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
