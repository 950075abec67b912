"""deploy/scenarios/common.wait_for: a broker's view that is behind (a topic
it does not know yet) is asked again; a failed check is not."""

from __future__ import annotations

import pytest

from deploy.scenarios.common import CheckFailed, NotYetKnown, wait_for


def test_a_view_not_yet_up_to_date_is_asked_again() -> None:
    answers = iter([NotYetKnown("t has no partition 0"), None, {"isr": [1, 2, 3]}])

    def look() -> dict[str, list[int]] | None:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert wait_for("in the ISR", look, timeout_s=5, interval_s=0) == {"isr": [1, 2, 3]}


def test_a_failed_check_ends_the_wait_and_a_view_that_stays_behind_times_out() -> None:
    def failed() -> None:
        raise CheckFailed("offsets are not 0..N-1")

    with pytest.raises(CheckFailed, match="offsets"):
        wait_for("x", failed, timeout_s=5, interval_s=0)

    def behind() -> None:
        raise NotYetKnown("t has no partition 0")

    with pytest.raises(CheckFailed, match="not within 0 s: x .*no partition 0"):
        wait_for("x", behind, timeout_s=0, interval_s=0)
