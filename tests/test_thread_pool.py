"""The tool workers' pool: its head start, and what killing one job does."""

from __future__ import annotations

import threading

from celery.concurrency import thread

from workers import thread_pool


def test_the_pool_gives_each_job_its_head_start():
    # Celery's own on_apply hands the job over and goes on at once (a refactoring once left
    # ours nested in a function below the class, unused: nothing failed but the speed).
    assert thread_pool.TaskPool.on_apply is not thread.TaskPool.on_apply


def _terminate_one(monkeypatch, cold: bool) -> bool:
    """Terminate a job as Celery does; True if the process would have been ended."""
    ended = threading.Event()
    monkeypatch.setattr(thread_pool, "_end_process", ended.set)
    monkeypatch.setattr(thread_pool, "_COLD_EXIT_SECONDS", 0.0)
    monkeypatch.setattr(thread_pool, "_COLD_SIGN_SECONDS", 0.5)
    monkeypatch.setattr(thread_pool.worker_state, "should_terminate", None)
    pool = thread_pool.TaskPool.__new__(thread_pool.TaskPool)
    pool.terminate_job(threading.get_ident())
    if cold:  # Celery marks a cold shutdown right after terminating its jobs
        monkeypatch.setattr(thread_pool.worker_state, "should_terminate", True)
    return ended.wait(2.0)


def test_a_revoked_job_does_not_end_the_process(monkeypatch):
    # A revoke with terminate asks the pool to kill one job; its thread cannot be, and the
    # process (with its other jobs) was ended for it.
    assert not _terminate_one(monkeypatch, cold=False)


def test_a_cold_shutdown_ends_the_process(monkeypatch):
    assert _terminate_one(monkeypatch, cold=True)
