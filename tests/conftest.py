pytest_plugins = ["tidal.lab.pytest_plugin"]
