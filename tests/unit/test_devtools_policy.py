"""tidal_dev.testing.policy.put_spec: the read-then-replace retried on 409 Conflict (a deployed
manager writes the policy's status between the two), any other error raised at once. The real
path runs in the site and fault suites' clean-ups against the deployed manager."""
import pytest
from kubernetes.client.exceptions import ApiException

from tidal_dev.testing.policy import put_spec

POLICY = ("colocation.tidal.io", "v1alpha1", "colocationpolicies", "default")


class Policies:
    """A ColocationPolicy store whose replace fails with the given statuses first."""

    def __init__(self, *failures: int):
        self.object = {"metadata": {"name": "default", "resourceVersion": "1"}, "spec": {"a": 1},
                       "status": {"observedGeneration": 1}}
        self.failures, self.reads, self.replaced = list(failures), 0, []

    def get_cluster_custom_object(self, *policy):
        assert policy == POLICY
        self.reads += 1
        self.object["metadata"]["resourceVersion"] = str(self.reads)
        return {k: dict(v) for k, v in self.object.items()}

    def replace_cluster_custom_object(self, *args):
        *policy, body = args
        assert tuple(policy) == POLICY
        if self.failures:
            raise ApiException(status=self.failures.pop(0))
        self.replaced.append(body)
        return body


def test_a_conflict_is_read_again_and_retried_keeping_metadata_and_status():
    store = Policies(409, 409)
    put_spec(store, POLICY, {"b": 2})
    assert store.reads == 3 and len(store.replaced) == 1
    body = store.replaced[0]
    assert body["spec"] == {"b": 2} and body["status"] == {"observedGeneration": 1}
    assert body["metadata"]["resourceVersion"] == "3"  # the latest read's, not the first's


@pytest.mark.parametrize("status", [404, 422, 500])
def test_any_other_error_is_raised_at_once(status):
    store = Policies(status)
    with pytest.raises(ApiException) as err:
        put_spec(store, POLICY, {"b": 2})
    assert err.value.status == status and store.reads == 1


def test_conflicts_past_the_timeout_are_raised():
    store = Policies(*[409] * 1000)
    with pytest.raises(ApiException) as err:
        put_spec(store, POLICY, {"b": 2}, timeout=0)
    assert err.value.status == 409
