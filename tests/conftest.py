pytest_plugins = ["tidal_dev.lab.pytest_plugin"]
