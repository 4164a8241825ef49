"""Whether a submission is graded (again) and why (`regrade_reason`), and what its new record
keeps of the old one (`history_entry`).
"""

from __future__ import annotations

STALE = "changed lesson (--force)"  # regraded only with --force


def regrade_reason(old: dict | None, sha: str, lesson: str) -> str | None:
    """Why a submission is graded (again), or None when its record is up to date: the first
    submission, a new submission (other files), or a changed lesson (`records.lesson_digest`)."""
    if old is None:
        return "first submission"
    if old.get("submission_sha256") != sha:
        return "new submission"
    if old.get("lesson_sha256") and old["lesson_sha256"] != lesson:
        return STALE
    return None


def history_entry(old: dict | None, at: str | None, why: str) -> dict:
    """What a new record keeps of the old one: its score in the history, and why it was
    graded again."""
    history = list((old or {}).get("history") or [])
    if old is not None:
        history.append(
            {
                key: old.get(key)
                for key in ("score", "max_score", "status", "submitted_at", "graded_at", "why")
            }
        )
    return {"submitted_at": at, "why": why, "history": history}
