"""``lab_harness.wait_for`` without a browser (these run in ``make test``): the value it returns, and a timeout's
message, which names what was awaited and each condition's last value."""

import pytest
from lab_harness import notebook_ready, wait_for


class Page:
    """Answers each ``execute_script`` with the next of ``states`` (the last one forever)."""

    def __init__(self, *states):
        self.states, self.calls = list(states), []

    def execute_script(self, script, *args):
        self.calls.append((script, args))
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


OPEN = {"jupyterapp": True, "panel_open": True, "context_ready": True, "kernel": "starting", "current_widget": None,
        "has_focus": False}


def test_wait_for_returns_the_first_ready_value():
    page = Page(OPEN, {**OPEN, "kernel": "busy"}, {**OPEN, "kernel": "idle"}, {**OPEN, "kernel": "busy"})
    assert wait_for(page, "x", notebook_ready, "js", "a.ipynb", timeout=5, poll=0) == {**OPEN, "kernel": "idle"}
    assert len(page.calls) == 3 and page.calls[0] == ("js", ("a.ipynb",))


def test_a_timeout_names_what_and_each_conditions_last_value():
    with pytest.raises(TimeoutError) as e:
        wait_for(Page(OPEN), "a.ipynb open with its kernel idle", notebook_ready, "js", timeout=0.05, poll=0.01)
    assert str(e.value) == ('waited 0 s for a.ipynb open with its kernel idle; the last state: {"jupyterapp": true, '
                            '"panel_open": true, "context_ready": true, "kernel": "starting", "current_widget": null, '
                            '"has_focus": false}')


@pytest.mark.parametrize("change", [{"jupyterapp": False}, {"panel_open": False}, {"context_ready": False},
                                    {"kernel": None}, {"kernel": "busy"}])
def test_each_condition_is_needed_and_focus_is_not(change):
    assert notebook_ready({**OPEN, "kernel": "idle"})
    assert not notebook_ready({**OPEN, "kernel": "idle", **change})
