"""Per-node eviction watermark overrides from node annotations."""
import pytest
from tidal.agent.qos.overrides import effective_watermarks
from tidal.api.policy import ColocationPolicy

P = "colocation.tidal.io/"


@pytest.mark.parametrize("annotations, expected", [
    (None, (True, 80, 30, 60, 30, 10, 30)),
    ({"unrelated": "x"}, (True, 80, 30, 60, 30, 10, 30)),
    ({P + "eviction-cpu-high-percent": "90", P + "eviction-cpu-low-percent": "50"}, (True, 90, 50, 60, 30, 10, 30)),
    ({P + "eviction-enabled": "false"}, (False, 80, 30, 60, 30, 10, 30)),
    ({P + "eviction-memory-high-percent": " 70 ", P + "eviction-dwell-seconds": "0",
      P + "eviction-cooldown-seconds": "5"}, (True, 80, 30, 70, 30, 0, 5)),
])
def test_valid_overrides_apply(annotations, expected):
    marks, problems = effective_watermarks(ColocationPolicy(), annotations)
    assert problems == []
    assert (marks.enabled, marks.cpu.high_percent, marks.cpu.low_percent, marks.memory.high_percent,
            marks.memory.low_percent, marks.dwell_seconds, marks.cooldown_seconds) == expected


@pytest.mark.parametrize("annotations, problem", [
    ({P + "eviction-cpu-high-percent": "high"}, "node annotation colocation.tidal.io/eviction-cpu-high-percent='high': must be an integer"),
    ({P + "eviction-enabled": "yes"}, "node annotation colocation.tidal.io/eviction-enabled='yes': must be \"true\" or \"false\""),
    ({P + "eviction-cpu-high-percent": "120"}, "node annotation colocation.tidal.io/eviction-cpu-high-percent: "),
    # a valid value that breaks low < high together with the policy's other watermark
    ({P + "eviction-cpu-low-percent": "85"}, "node annotation colocation.tidal.io/eviction-cpu-low-percent: must be lower than highPercent"),
])
def test_an_invalid_override_changes_nothing_and_names_the_annotation(annotations, problem):
    policy = ColocationPolicy()
    # a valid override next to the bad one is not applied either
    marks, problems = effective_watermarks(policy, {**annotations, P + "eviction-dwell-seconds": "1"})
    assert marks == policy.eviction_watermarks
    assert len(problems) == 1 and problems[0].startswith(problem), problems


V = "volcano.sh/"


@pytest.mark.parametrize("annotations, cpu, memory, problems, conflicts", [
    pytest.param({V + "evicting-cpu-high-watermark": "90", V + "evicting-cpu-low-watermark": "40"},
                 (90, 40), (60, 30), [], [], id="volcano-cpu-aliases-apply"),
    pytest.param({V + "evicting-memory-high-watermark": "70", V + "evicting-memory-low-watermark": "20"},
                 (80, 30), (70, 20), [], [], id="volcano-memory-aliases-apply"),
    pytest.param({V + "evicting-cpu-high-watermark": "90", P + "eviction-cpu-high-percent": "90"},
                 (90, 30), (60, 30), [], [], id="agreeing-alias-is-no-conflict"),
    pytest.param({V + "evicting-cpu-high-watermark": "95", P + "eviction-cpu-high-percent": "85"},
                 (85, 30), (60, 30), [],
                 ["node annotation colocation.tidal.io/eviction-cpu-high-percent=85 and its alias "
                  "volcano.sh/evicting-cpu-high-watermark=95 disagree: colocation.tidal.io/eviction-cpu-high-percent wins"],
                 id="tidal-name-wins-and-the-conflict-is-reported"),
    pytest.param({V + "evicting-cpu-high-watermark": "lots"}, (80, 30), (60, 30),
                 ["node annotation volcano.sh/evicting-cpu-high-watermark (alias of "
                  "colocation.tidal.io/eviction-cpu-high-percent)='lots': must be an integer in ASCII digits, e.g. 80"], [],
                 id="a-bad-alias-value-names-the-alias"),
    pytest.param({V + "evicting-cpu-low-watermark": "85"}, (80, 30), (60, 30),
                 ["node annotation volcano.sh/evicting-cpu-low-watermark (alias of "
                  "colocation.tidal.io/eviction-cpu-low-percent): must be lower than highPercent, got lowPercent 85, "
                  "highPercent 80"], [],
                 id="a-rule-broken-through-an-alias-names-the-alias"),
])
def test_volcano_watermark_annotations_are_aliases(annotations, cpu, memory, problems, conflicts):
    from tidal.agent.qos.overrides import node_watermarks
    marks, found, disagreements = node_watermarks(ColocationPolicy(), annotations)
    assert (marks.cpu.high_percent, marks.cpu.low_percent) == cpu
    assert (marks.memory.high_percent, marks.memory.low_percent) == memory
    assert [p.split(" (with the node")[0] for p in found] == problems
    assert disagreements == conflicts
    assert effective_watermarks(ColocationPolicy(), annotations)[1] == [*conflicts, *found]
