"""Each mistake costs its own exercise: while grading, a later exercise runs on the course's
reference for the earlier parts of its notebook that it calls.

An exercise declares the earlier exercises of its notebook that the student's code calls by name
(``Exercise.uses``: lesson 02's ``SelfAttention`` calls ``scaled_dot_product_attention``). In the
student's process (`verify_child`), every request the judge makes for that exercise runs with
those notebook globals rebound to the course's references, and put back afterwards
(`course_parts`, `in_place`); the test cell says so (`note`). So a student whose attention lacks
√d_k loses the attention exercise's points, and keeps SelfAttention's when SelfAttention itself is
right. What the student's code holds otherwise (an alias taken when a class was defined, a
default argument) is not rebound: such code runs on the student's own earlier part, as before.

The stand-ins are made here, in the course's package, before the student's first line runs:
a function that calls the reference, a subclass whose ``__init__`` calls the reference's. The
student's code calls them, not the reference, so the guard (`verify_guard`), which refuses a call
of a forbidden reference *from the student's code*, lets them through (SelfAttention forbids the
course's attention for the student's own use).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

_MISSING = object()


def stand_in(reference):
    """The course's `reference` as the student's notebook name: a function (or a subclass) of
    this package that calls it."""
    if isinstance(reference, type):

        def __init__(self, *args, **kwargs):
            reference.__init__(self, *args, **kwargs)

        namespace = {"__init__": __init__, "__module__": reference.__module__}
        return type(reference.__name__, (reference,), namespace)

    def course_version(*args, **kwargs):
        return reference(*args, **kwargs)

    course_version.__name__ = course_version.__qualname__ = reference.__name__
    course_version.__doc__ = reference.__doc__
    return course_version


def course_parts(exercises: dict) -> dict[str, dict[str, object]]:
    """{exercise: {notebook name: the course's stand-in}} for every exercise that `uses` earlier
    ones; built from ``check.EXERCISES`` before the student's code runs."""
    return {
        name: {used: stand_in(exercises[used].reference) for used in ex.uses}
        for name, ex in exercises.items()
        if getattr(ex, "uses", ())
    }


@contextlib.contextmanager
def in_place(namespace: dict, parts: dict[str, object]) -> Iterator[None]:
    """Rebind `parts` in the notebook's `namespace` for the duration; then put back what was
    there (a name the notebook did not define is removed again)."""
    saved = {name: namespace.get(name, _MISSING) for name in parts}
    namespace.update(parts)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is _MISSING:
                namespace.pop(name, None)
            else:
                namespace[name] = value


def note(exercise: str, uses: tuple[str, ...]) -> str:
    """What a test cell prints before a check of `exercise` that runs on the course's parts."""
    names = [f"`{name}`" for name in uses]
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return (
        f"ⓘ {exercise} is graded with the course's {listed} in place of yours, so that a "
        "mistake there is counted once, in its own exercise."
    )
