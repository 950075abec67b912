"""Pacer: a long loop lets other tasks run once its step has used the budget,
and not before."""

from __future__ import annotations

import time

import trio

from storage.pace import Pacer


class StepTimes(trio.abc.Instrument):
    """The length of each step of the task named ``name``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.steps: list[float] = []
        self._started = 0.0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._started = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith(self.name):
            self.steps.append(time.perf_counter() - self._started)


def run_loop(items: int, item_s: float, budget_s: float) -> tuple[list[float], float]:
    """(the loop's step lengths, its longest item)."""
    longest = 0.0

    async def long_loop() -> None:
        nonlocal longest
        pacer = Pacer(budget_s=budget_s)
        for _ in range(items):
            started = time.perf_counter()
            time.sleep(item_s)  # one item's work
            longest = max(longest, time.perf_counter() - started)
            await pacer.tick()

    steps = StepTimes("long_loop")
    trio.run(long_loop, instruments=[steps])
    return steps.steps, longest


def test_no_step_runs_much_past_the_budget() -> None:
    steps, longest = run_loop(items=40, item_s=0.002, budget_s=0.01)
    # A tick comes after each item: a step ends within one item of the budget
    # (unpaced, one step would hold all 40 items: 80 ms).
    assert len(steps) >= 4 and max(steps) < 0.01 + longest + 0.02, (steps, longest)


def test_items_inside_the_budget_share_a_step() -> None:
    steps, _ = run_loop(items=40, item_s=0.0005, budget_s=0.2)
    assert len(steps) <= 3, steps
