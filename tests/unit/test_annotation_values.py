"""Garbage in the node annotations users type (issue 15): every number Tidal reads from a node
annotation is ASCII digits only (``int()``/``float()`` alone take "١٠", "1_0", "1e1", "nan"),
and a message repeats a huge value only cut short."""
import pytest

from tidal.agent.qos.overrides import ANNOTATIONS, node_watermarks
from tidal.api import qos
from tidal.api.node_mode import node_mode
from tidal.api.policy import ColocationPolicy
from tidal.manager.oversell.node_decision import _override

GARBAGE = ["", " ", "١٠", "1_0", "1e1", "nan", "inf", "-", "+", "80%", "0x50", "80.0.0", "８０", "eighty",
           '{"cpu": 80}', "x" * 100_000]


@pytest.mark.parametrize("text, value", [("80", 80), (" 80 ", 80), ("-5", -5), ("+7", 7)])
def test_annotation_integer_takes_ascii_integers(text, value):
    assert qos.annotation_integer(text) == value


@pytest.mark.parametrize("text", GARBAGE + ["12.5"])
def test_annotation_integer_refuses_anything_else_naming_the_rule(text):
    with pytest.raises(ValueError, match="ASCII digits"):
        qos.annotation_integer(text)


@pytest.mark.parametrize("text, value", [("80", 80.0), ("12.5", 12.5), (" 0 ", 0.0), ("-1", -1.0)])
def test_annotation_number_takes_ascii_decimals(text, value):
    assert qos.annotation_number(text) == value


@pytest.mark.parametrize("text", GARBAGE)
def test_annotation_number_refuses_anything_else_naming_the_rule(text):
    with pytest.raises(ValueError, match="ASCII digits"):
        qos.annotation_number(text)


def test_shown_cuts_a_huge_value():
    assert qos.shown("abc") == "'abc'"
    long = qos.shown("x" * 100_000)
    assert len(long) < 120 and "100000 characters" in long


INTEGER_OVERRIDES = sorted(a for a, path in ANNOTATIONS.items() if path != ("enabled",))


@pytest.mark.parametrize("text", GARBAGE)
@pytest.mark.parametrize("annotation", INTEGER_OVERRIDES)
def test_a_garbage_eviction_override_is_named_and_changes_nothing(annotation, text):
    policy = ColocationPolicy()
    marks, problems, _ = node_watermarks(policy, {annotation: text})
    assert marks == policy.eviction_watermarks
    assert len(problems) == 1 and annotation in problems[0] and "ASCII digits" in problems[0], problems
    assert len(problems[0]) < 300


@pytest.mark.parametrize("text", GARBAGE + ["101", "-1"])
@pytest.mark.parametrize("key", ["colocation.tidal.io/oversell-ratio-percent",
                                 "colocation.tidal.io/oversell-safety-margin-percent"])
def test_a_garbage_oversell_override_is_a_note_and_the_policy_value_stays(key, text):
    notes = []
    assert _override({key: text}, key, 42.0, notes) == 42.0
    assert len(notes) == 1 and key in notes[0] and "0-100" in notes[0] and len(notes[0]) < 300


@pytest.mark.parametrize("text", GARBAGE + ["gpu", "cpu,gpu", ",", "CPU"])
def test_garbage_oversell_types_are_a_problem_and_both_types_stay(text):
    mode = node_mode({qos.OVERSUBSCRIPTION_NODE_LABEL: "true"}, {"colocation.tidal.io/oversell-types": text})
    clean = node_mode({qos.OVERSUBSCRIPTION_NODE_LABEL: "true"}, {})
    assert (mode.mode, mode.oversell_types) == (clean.mode, clean.oversell_types)
    assert len(mode.problems) == 1 and "oversell-types" in mode.problems[0] and len(mode.problems[0]) < 300
