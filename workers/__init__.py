"""Celery workers that run training runs (see workers/celery.py for the app)."""

from workers.celery import app as celery_app

__all__ = ["celery_app"]
