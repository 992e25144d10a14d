"""`ansible-galaxy collection build` gives a tarball that installs and works: a playbook outside
this checkout uses the installed tidal.colocation (a module and a role) by its FQCN."""
import tarfile
import textwrap

from collection_tools import run, tool


def test_tarball_holds_the_collection_and_nothing_else(collection_tarball):
    with tarfile.open(collection_tarball) as tar:
        names = set(tar.getnames())
    for required in ("MANIFEST.json", "meta/runtime.yml", "plugins/modules/policy.py",
                     "plugins/module_utils/policy_model.py", "roles/tidal_controllers/files/crds/colocation.tidal.io_nodeprofiles.yaml",
                     "roles/kubelet_cpu_manager/meta/argument_specs.yml", "tests/sanity/ignore-2.19.txt",
                     # galaxy.yml's readme, and the module pages it links to
                     "COLLECTION.md", "docs/ansible/modules/node.md"):
        assert required in names, required
    top_tests = {n.split("/")[1] for n in names if n.startswith("tests/") and n.count("/") >= 1}
    assert top_tests <= {"integration", "sanity", "config.yml", ""}
    assert not any(n.startswith(("controllers/", "bench/", "hack/", ".venv/")) for n in names)


def test_installed_collection_is_usable_from_a_playbook(installed_collection, tmp_path):
    collections_root = installed_collection.parents[2]
    kubelet_config = tmp_path / "config.yaml"
    kubelet_config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
    containerd_root = tmp_path / "node"
    (containerd_root / "etc" / "containerd").mkdir(parents=True)
    (containerd_root / "etc" / "containerd" / "config.toml").write_text("version = 2\n")
    playbook = tmp_path / "use.yml"
    playbook.write_text(textwrap.dedent(f"""\
        - hosts: localhost
          connection: local
          gather_facts: false
          tasks:
            - name: Use a module of the installed collection
              tidal.colocation.kubelet_config:
                path: {kubelet_config}
                cpu_manager_policy: static
                reserved_system_cpus: "0"
            - name: Use a role of the installed collection
              ansible.builtin.include_role:
                name: tidal.colocation.containerd_nri
              vars:
                containerd_nri_root: {containerd_root}
                containerd_nri_version: "1.7.22"
                containerd_nri_manage_service: false
        """))
    proc = run([tool("ansible-playbook"), "-i", "localhost,", "-e", "ansible_python_interpreter={{ ansible_playbook_python }}",
                str(playbook)], tmp_path, timeout=300,
               ANSIBLE_COLLECTIONS_PATH=str(collections_root), ANSIBLE_CONFIG=str(tmp_path / "none.cfg"))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    listed = run([tool("ansible-galaxy"), "collection", "list", "tidal.colocation"], tmp_path,
                 ANSIBLE_COLLECTIONS_PATH=str(collections_root), ANSIBLE_CONFIG=str(tmp_path / "none.cfg")).stdout
    assert f"# {collections_root / 'ansible_collections'}" in listed and "tidal.colocation 0.1.0" in listed
    assert "cpuManagerPolicy: static" in kubelet_config.read_text()
    assert "disable = false" in (containerd_root / "etc" / "containerd" / "config.toml").read_text()
