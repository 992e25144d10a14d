"""The node-agent fixtures and helpers of test_agent_qos.py (a kwok node standing for this machine,
a LocalKubelet, starting tidal-agent run), for the advanced-feature lab tests. pytest imports test
modules with ``--import-mode=importlib``, so they are loaded from the file here."""
import importlib.util
import sys
from pathlib import Path

_NAME = "tidal_lab_agent_qos_fixtures"
if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_NAME, Path(__file__).with_name("test_agent_qos.py"))
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_NAME] = _module
    _spec.loader.exec_module(_module)
_base = sys.modules[_NAME]

hierarchy, kubelet, node = _base.hierarchy, _base.kubelet, _base.node
_agent, _pod, _be, _read = _base._agent, _base._pod, _base._be, _base._read
