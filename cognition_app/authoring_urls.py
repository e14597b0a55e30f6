"""Workflow authoring pages (see cognition_app/authoring.py)."""

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
