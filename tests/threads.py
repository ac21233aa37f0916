"""Running a test's work on several threads at once."""
from __future__ import annotations

import threading
from typing import Callable


def errors_on_threads(work: Callable[[], None], threads: int) -> list[BaseException]:
    """Run `work` on `threads` threads at once and return what they raised, failed assertions included (an
    exception on a thread is otherwise only printed, and the test would pass)."""
    errors: list[BaseException] = []

    def guarded():
        try:
            work()
        except BaseException as e:                          # noqa: BLE001 - handed to the test's assertion
            errors.append(e)
    started = [threading.Thread(target=guarded) for _ in range(threads)]
    for t in started:
        t.start()
    for t in started:
        t.join()
    return errors
