"""``celery -A tests.flower_guard``: the project's Celery app, with stock Flower refused.

The lines below are the ones workers/celery_app.py would carry for ``celery -A workers
flower`` to stop the same way (tests/test_security_flower_leaks.py).
"""

import sys

from workers import app

if "flower" in sys.argv:  # stock `celery -A workers flower`: none of adk-celery flower's lockdown
    from workers.flower import refuse_stock_flower

    refuse_stock_flower()

__all__ = ["app"]
