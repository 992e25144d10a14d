from hypothesis import HealthCheck, settings

pytest_plugins = ["tidal_dev.lab.pytest_plugin"]

# Property tests judge results, not speed: on this shared machine a loaded moment must not fail one
# by how long its inputs took to generate or an example took to run (seen: "Input generation is
# slow" in test_collector_histogram during a full unit run beside another suite). A test's own
# @settings still override the rest of this profile.
settings.register_profile("tidal", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.load_profile("tidal")
