"""The deployment examples in deploy/ (Kubernetes, Compose, systemd) are valid and consistent.

What is checked, without a cluster or a container engine:
- every YAML file parses; every Kubernetes object has the fields the examples promise (probes on the
  admin port and the right paths, non-root, read-only root filesystem, dropped capabilities, resources,
  state_dir on a writable volume, the config mounted as a directory so watch_config sees updates);
- every authproxy configuration they embed passes `authproxy check`, after the volumes, compose secrets or
  systemd credentials it reads are materialised in a temporary directory exactly where the manifest puts
  them (the secret files come from the manifest's own Secret objects, so a `file:` path that no volume
  provides, or a key the Secret lacks, fails here); the Kubernetes configurations are also started
  (`serve`) with their listen addresses moved to free loopback ports, which loads the interception CA;
- the compose file's services, networks, secrets and volumes refer to each other consistently;
- the systemd unit passes `systemd-analyze verify`, its credentials and directories match its config, and
  the system calls and socket families authproxy uses while serving are inside its SystemCallFilter=
  and RestrictAddressFamilies= (strace; skipped where ptrace is not allowed).
"""

import http.client
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import tomllib

import pytest
import yaml

import harness

DEPLOY = os.path.join(harness.REPO_ROOT, "deploy")
K8S = os.path.join(DEPLOY, "kubernetes")
COMPOSE = os.path.join(DEPLOY, "compose.yaml")
UNIT = os.path.join(DEPLOY, "authproxy.service")
SYSTEMD_CONF = os.path.join(DEPLOY, "authproxy.conf")
DASHBOARD = os.path.join(DEPLOY, "grafana", "authproxy-dashboard.json")
ALERTS = os.path.join(DEPLOY, "prometheus", "authproxy-alerts.yaml")
ALERTS_TEST = os.path.join(DEPLOY, "prometheus", "authproxy-alerts.test.yaml")
IMAGE_UID = 10001  # the Dockerfile's authproxy user


def yaml_files():
    out = []
    for root, _, files in os.walk(DEPLOY):
        out += [os.path.join(root, f) for f in files if f.endswith((".yaml", ".yml"))]
    return sorted(out)


def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


# ---------------------------------------------------------------------------
# helpers: configurations
# ---------------------------------------------------------------------------

QUOTED_PATH = re.compile(r'"(file:)?(/[^"]*)"')


def rewrite_paths(text, mapping):
    """Move every quoted absolute path (plain or after file:) under one of mapping's prefixes to its
    replacement. Returns (text, paths that matched no prefix)."""
    unmatched = []
    prefixes = sorted(mapping, key=len, reverse=True)

    def sub(m):
        path = m.group(2)
        for p in prefixes:
            if path == p or path.startswith(p.rstrip("/") + "/"):
                return '"%s%s"' % (m.group(1) or "", mapping[p] + path[len(p.rstrip("/")):])
        unmatched.append(path)
        return m.group(0)

    return QUOTED_PATH.sub(sub, text), unmatched


def file_refs(config):
    """Every "file:/path" value in a parsed TOML configuration."""
    out = []

    def walk(v):
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, str) and v.startswith("file:"):
            out.append(v[5:])

    walk(config)
    return out


def run_check(path, env=None):
    r = harness.run_cli(["check", "--config", path], env=env)
    assert r.returncode == 0, "authproxy check failed for %s:\n%s\n%s" % (path, r.stdout, r.stderr)
    assert "is valid" in r.stdout
    return r.stdout


def networks_cover(blocks, net):
    net = ipaddress.ip_network(net)
    return any(net.version == b.version and net.subnet_of(b) for b in map(ipaddress.ip_network, blocks))


def host_port(addr):
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def test_dockerfile_fits_the_examples():
    text = open(os.path.join(harness.REPO_ROOT, "Dockerfile")).read()
    # numeric, so Kubernetes' runAsNonRoot can check it; the uid the manifests and compose use
    assert re.search(r"(?m)^USER %d:%d$" % (IMAGE_UID, IMAGE_UID), text)
    assert "--uid %d --gid %d " % (IMAGE_UID, IMAGE_UID) in text
    assert re.search(r"(?m)^EXPOSE 3128 9128$", text), "the proxy and the admin port"
    assert 'VOLUME ["/var/lib/authproxy"]' in text


# ---------------------------------------------------------------------------
# YAML
# ---------------------------------------------------------------------------

def test_deploy_files_exist():
    for p in (os.path.join(K8S, "sidecar.yaml"), os.path.join(K8S, "shared-proxy.yaml"), COMPOSE, UNIT,
              SYSTEMD_CONF, os.path.join(DEPLOY, "README.md"), DASHBOARD, ALERTS, ALERTS_TEST):
        assert os.path.isfile(p), p


def test_dockerfile_builds_with_the_swift_the_tests_run_with():
    """The image is built from what was tested: its build stage names the toolchain these tests were built with."""
    out = subprocess.run(["swift", "--version"], capture_output=True, text=True, check=True).stdout
    version = re.search(r"Swift version (\d+\.\d+(?:\.\d+)?)", out).group(1)
    text = open(os.path.join(harness.REPO_ROOT, "Dockerfile")).read()
    stages = re.findall(r"(?m)^FROM swift:(\S+) AS build$", text)
    assert stages == ["%s-bookworm" % version], (stages, version)


# ---------------------------------------------------------------------------
# Monitoring: Grafana dashboard, Prometheus alert rules
# ---------------------------------------------------------------------------

def metric_names():
    """Every metric name the proxy exports (the names are string literals in Sources/)."""
    names = set()
    for root, _, files in os.walk(os.path.join(harness.REPO_ROOT, "Sources")):
        for f in files:
            if f.endswith(".swift"):
                names |= set(re.findall(r"\b(authproxy_[a-z_]+)", open(os.path.join(root, f)).read()))
    assert {"authproxy_requests_total", "authproxy_parent_backoff", "authproxy_cluster_connected"} <= names
    return names


def referenced_metrics(expr):
    return {re.sub(r"_(bucket|sum|count)$", "", m) for m in re.findall(r"\b(authproxy_[a-z_]+)", expr)}


def test_grafana_dashboard():
    with open(DASHBOARD) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(dash["panels"]) >= 10 and all(exprs)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    unknown = {m for e in exprs for m in referenced_metrics(e)} - metric_names()
    assert not unknown, "the dashboard queries metrics the proxy does not export: %s" % unknown
    used = {m for e in exprs for m in referenced_metrics(e)}
    for m in ("authproxy_requests_total", "authproxy_upstream_errors_total", "authproxy_token_expiry_timestamp_seconds",
              "authproxy_parent_backoff", "authproxy_cluster_connected", "authproxy_request_duration_seconds",
              "authproxy_cluster_limits_fallback"):
        assert m in used, m


def test_prometheus_alert_rules():
    docs = load_docs(ALERTS)
    rules = {r["alert"]: r for g in docs[0]["groups"] for r in g["rules"]}
    for name in ("AuthproxyTokenRefreshFailing", "AuthproxyTokenAboutToExpire", "AuthproxyUpstreamErrorRate",
                 "AuthproxyParentProxyInBackoff", "AuthproxyRedisUnavailable", "AuthproxyCredentialExpiresSoon"):
        assert name in rules, name
    for name, r in rules.items():
        assert r["labels"]["severity"] in ("warning", "critical"), name
        assert r["annotations"]["summary"], name
        unknown = referenced_metrics(r["expr"]) - metric_names()
        assert not unknown, "%s uses metrics the proxy does not export: %s" % (name, unknown)
    assert "authproxy_parent_backoff" in rules["AuthproxyParentProxyInBackoff"]["expr"]
    assert "authproxy_cluster_connected" in rules["AuthproxyRedisUnavailable"]["expr"]
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is needed; scripts/test.sh installs it"
    r = subprocess.run([promtool, "check", "rules", ALERTS], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([promtool, "test", "rules", os.path.basename(ALERTS_TEST)], capture_output=True, text=True,
                       cwd=os.path.dirname(ALERTS_TEST))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: os.path.relpath(p, DEPLOY))
def test_yaml_parses(path):
    docs = load_docs(path)
    assert docs, "%s holds no document" % path
    for d in docs:
        assert isinstance(d, dict)


# ---------------------------------------------------------------------------
# Kubernetes
# ---------------------------------------------------------------------------

class Manifest:
    def __init__(self, path):
        self.path = path
        self.docs = load_docs(path)
        for d in self.docs:
            assert {"apiVersion", "kind", "metadata"} <= set(d), d
            assert d["metadata"].get("name")

    def of_kind(self, kind):
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind):
        found = self.of_kind(kind)
        assert len(found) == 1, "%s: expected one %s, found %d" % (self.path, kind, len(found))
        return found[0]

    def named(self, kind, name):
        for d in self.of_kind(kind):
            if d["metadata"]["name"] == name:
                return d
        return None

    @property
    def deployment(self):
        return self.one("Deployment")

    @property
    def pod(self):
        return self.deployment["spec"]["template"]["spec"]

    def all_containers(self):
        return self.pod.get("initContainers", []) + self.pod["containers"]

    def authproxy(self):
        found = [c for c in self.all_containers() if c["name"] == "authproxy"]
        assert len(found) == 1
        c = found[0]
        if c in self.pod.get("initContainers", []):
            # an init container only keeps running (a sidecar) with restartPolicy: Always
            assert c.get("restartPolicy") == "Always", "authproxy in initContainers must be a native sidecar"
        return c

    def config_map_for(self, container):
        """(ConfigMap, key, mountPath) of the configuration named by the container's --config."""
        args = container.get("args", []) + container.get("command", [])
        path = args[args.index("--config") + 1]
        for m in container["volumeMounts"]:
            if path.startswith(m["mountPath"].rstrip("/") + "/"):
                vol = self.volume(m["name"])
                assert "configMap" in vol, "the configuration should come from a ConfigMap"
                assert "subPath" not in m, ("a subPath mount never sees ConfigMap updates: mount the "
                                            "directory so watch_config can reload")
                cm = self.named("ConfigMap", vol["configMap"]["name"])
                assert cm is not None
                key = path[len(m["mountPath"].rstrip("/")) + 1:]
                return cm, key, m["mountPath"]
        raise AssertionError("no volume mount provides %s" % path)

    def volume(self, name):
        for v in self.pod["volumes"]:
            if v["name"] == name:
                return v
        raise AssertionError("no volume %s" % name)

    def config_text(self):
        cm, key, _ = self.config_map_for(self.authproxy())
        return cm["data"][key]

    def config(self):
        return tomllib.loads(self.config_text())


def container_port(container, port):
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    raise AssertionError("container %s has no port named %s" % (container["name"], port))


def make_ca(directory):
    r = harness.run_cli(["ca", "init", "--dir", directory])
    assert r.returncode == 0, r.stderr
    return {"ca.pem": os.path.join(directory, "ca.pem"), "ca.key": os.path.join(directory, "ca.key")}


def materialise(manifest, container, root):
    """Create the container's volume mounts under root, as the kubelet would: ConfigMap keys, Secret keys
    (from the manifest's Secret objects; the interception CA, which is created out of band, from
    `authproxy ca init`), empty directories. Returns {mountPath: directory}."""
    mapping = {}
    for m in container["volumeMounts"]:
        vol = manifest.volume(m["name"])
        target = os.path.join(root, m["mountPath"].lstrip("/"))
        os.makedirs(target, exist_ok=True)
        mapping[m["mountPath"]] = target
        if "emptyDir" in vol:
            assert not m.get("readOnly"), m
            continue
        if "configMap" in vol:
            data = manifest.named("ConfigMap", vol["configMap"]["name"])["data"]
            items = vol["configMap"].get("items")
        elif "secret" in vol:
            name = vol["secret"]["secretName"]
            secret = manifest.named("Secret", name)
            items = vol["secret"].get("items")
            if secret is not None:
                data = dict(secret.get("stringData", {}))
            else:
                keys = {i["key"] for i in items or []}
                assert keys and keys <= {"ca.pem", "ca.key"}, (
                    "Secret %s is neither in the manifest nor the interception CA" % name)
                ca = make_ca(os.path.join(root, "_ca-" + name))
                data = {k: open(ca[k]).read() for k in keys}
        else:
            raise AssertionError("unexpected volume type in %s" % vol)
        files = [(i["key"], i["path"]) for i in items] if items else [(k, k) for k in data]
        for key, path in files:
            assert key in data, "volume %s: key %s missing from its source" % (m["name"], key)
            with open(os.path.join(target, path), "w") as f:
                f.write(data[key])
    return mapping


def write_config(manifest, root, extra_mapping=None):
    mapping = materialise(manifest, manifest.authproxy(), root)
    mapping.update(extra_mapping or {})
    text, unmatched = rewrite_paths(manifest.config_text(), mapping)
    assert not unmatched, "paths in the configuration that no volume provides: %s" % unmatched
    _, key, mount = manifest.config_map_for(manifest.authproxy())
    path = os.path.join(mapping[mount], key)
    with open(path, "w") as f:
        f.write(text)
    return path


K8S_EXAMPLES = ["sidecar.yaml", "shared-proxy.yaml"]


@pytest.fixture(params=K8S_EXAMPLES)
def manifest(request):
    return Manifest(os.path.join(K8S, request.param))


# Field names of the Kubernetes API objects the examples use (core/v1, apps/v1), to catch a misspelt key
# (which the API server would drop with only a warning) without a cluster or a schema download.
POD_SPEC = {"initContainers", "containers", "volumes", "securityContext", "automountServiceAccountToken",
            "terminationGracePeriodSeconds", "topologySpreadConstraints", "serviceAccountName", "nodeSelector",
            "affinity", "tolerations", "priorityClassName", "dnsPolicy", "enableServiceLinks", "hostAliases"}
CONTAINER = {"name", "image", "imagePullPolicy", "command", "args", "workingDir", "ports", "env", "envFrom",
             "resources", "volumeMounts", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle",
             "securityContext", "restartPolicy", "terminationMessagePolicy", "resizePolicy"}
CONTAINER_SC = {"runAsUser", "runAsGroup", "runAsNonRoot", "readOnlyRootFilesystem", "allowPrivilegeEscalation",
                "capabilities", "seccompProfile", "privileged", "procMount", "seLinuxOptions", "appArmorProfile"}
POD_SC = {"runAsUser", "runAsGroup", "runAsNonRoot", "fsGroup", "fsGroupChangePolicy", "seccompProfile",
          "supplementalGroups", "sysctls", "seLinuxOptions", "appArmorProfile"}
PROBE = {"httpGet", "tcpSocket", "exec", "grpc", "initialDelaySeconds", "periodSeconds", "timeoutSeconds",
         "successThreshold", "failureThreshold", "terminationGracePeriodSeconds"}
VOLUME_MOUNT = {"name", "mountPath", "readOnly", "subPath", "subPathExpr", "mountPropagation"}
VOLUME = {"name", "configMap", "secret", "emptyDir", "persistentVolumeClaim", "projected"}


def test_k8s_field_names(manifest):
    pod = manifest.pod
    assert set(pod) <= POD_SPEC, set(pod) - POD_SPEC
    assert set(pod["securityContext"]) <= POD_SC
    assert set(manifest.deployment["spec"]) <= {"replicas", "selector", "strategy", "template",
                                                "minReadySeconds", "revisionHistoryLimit",
                                                "progressDeadlineSeconds"}
    for c in manifest.all_containers():
        assert set(c) <= CONTAINER, (c["name"], set(c) - CONTAINER)
        assert set(c["securityContext"]) <= CONTAINER_SC, c["name"]
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            assert set(c.get(probe, {})) <= PROBE, (c["name"], probe)
        for m in c.get("volumeMounts", []):
            assert set(m) <= VOLUME_MOUNT, m
    for v in pod["volumes"]:
        assert set(v) <= VOLUME and len(v) == 2, v


def test_k8s_security_context(manifest):
    pod = manifest.pod
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod.get("automountServiceAccountToken") is False
    for c in manifest.all_containers():
        sc = c["securityContext"]
        assert sc.get("readOnlyRootFilesystem") is True, c["name"]
        assert sc.get("allowPrivilegeEscalation") is False, c["name"]
        assert sc["capabilities"]["drop"] == ["ALL"], c["name"]
        assert sc.get("runAsNonRoot", pod["securityContext"].get("runAsNonRoot")) is True
    ap = manifest.authproxy()
    assert ap["securityContext"]["runAsUser"] == IMAGE_UID
    # secret files are 0440: readable through the group that fsGroup gives them
    assert pod["securityContext"]["fsGroup"] == ap["securityContext"]["runAsGroup"] == IMAGE_UID


def test_k8s_resources(manifest):
    for c in manifest.all_containers():
        r = c["resources"]
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(r[kind]), (c["name"], kind)


def test_k8s_probes_hit_the_admin_listener(manifest):
    ap = manifest.authproxy()
    config = manifest.config()
    admin_host, admin_port = host_port(config["admin"]["listen"])
    # the kubelet probes from the node: the admin listener must be on the Pod IP, not loopback
    assert admin_host in ("0.0.0.0", "::"), admin_host
    allow = config["admin"]["allow"]
    assert not networks_cover(allow, "0.0.0.0/0") and not networks_cover(allow, "::/0"), (
        "the admin listener must not be open to every address")
    assert ap["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert ap["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if probe in ap:
            port = container_port(ap, ap[probe]["httpGet"]["port"])
            assert port == admin_port, (probe, port, admin_port)


def test_k8s_config_settings(manifest):
    config = manifest.config()
    assert config["proxy"]["watch_config"] is True
    token_types = {"arcgis-token", "oauth-app", "oauth-user"}
    creds = config.get("credential", [])
    assert any(c["type"] in token_types and c.get("prefetch") is True for c in creds)
    for c in creds:
        if c.get("prefetch"):
            assert c["type"] in token_types
    # state_dir on a writable volume (the root filesystem is read-only)
    state = config["proxy"]["state_dir"]
    mounts = [m for m in manifest.authproxy()["volumeMounts"]
              if state == m["mountPath"] or state.startswith(m["mountPath"].rstrip("/") + "/")]
    assert mounts and not mounts[-1].get("readOnly")
    vol = manifest.volume(mounts[-1]["name"])
    assert "emptyDir" in vol or "persistentVolumeClaim" in vol
    # secrets are read from files, never written into the ConfigMap
    assert file_refs(config), "expected file: secrets"
    for key in ("state_key", "password", "key", "client_secret"):
        for section in [config["proxy"]] + creds + config.get("client", []):
            v = section.get(key)
            assert v is None or v.startswith("file:"), (key, v)


def policy_rule_admits_port(rule, port, containers):
    """Whether an ingress rule of a NetworkPolicy admits TCP `port`: a rule without `ports` admits every port,
    an entry without `port` every port of its protocol, a named port the container port of that name, and
    `endPort` a range."""
    entries = rule.get("ports")
    if not entries:
        return True
    for e in entries:
        if e.get("protocol", "TCP") != "TCP":
            continue
        if "port" not in e:
            return True
        p = e["port"]
        if isinstance(p, str):
            if any(cp.get("name") == p and cp.get("containerPort") == port
                   for c in containers for cp in c.get("ports", [])):
                return True
        elif p <= port <= e.get("endPort", p):
            return True
    return False


def policy_peer_admits_everyone(peer):
    """A `from` entry that selects every source: an empty selector (`namespaceSelector: {}` is every namespace)
    or an ipBlock of the whole address space."""
    if "ipBlock" in peer:
        return peer["ipBlock"].get("cidr") in ("0.0.0.0/0", "::/0")
    selectors = [peer[k] for k in ("namespaceSelector", "podSelector") if k in peer]
    return all(not (sel or {}).get("matchLabels") and not (sel or {}).get("matchExpressions") for sel in selectors)


def test_k8s_network_policy_limits_the_admin_port(manifest):
    admin_port = host_port(manifest.config()["admin"]["listen"])[1]
    labels = manifest.deployment["spec"]["template"]["metadata"]["labels"]
    containers = manifest.all_containers()
    policies = manifest.of_kind("NetworkPolicy")
    assert policies
    for np in policies:
        sel = np["spec"]["podSelector"]["matchLabels"]
        assert sel.items() <= labels.items()
        # Ingress rules isolate the Pod only when the policy is of type Ingress (implied when no types are given).
        assert "Ingress" in np["spec"].get("policyTypes", ["Ingress"]), np["metadata"]["name"]
        for rule in np["spec"].get("ingress", []):
            if not policy_rule_admits_port(rule, admin_port, containers):
                continue
            peers = rule.get("from") or []
            assert peers, "the admin port %d must not be open to every source: %s" % (admin_port, rule)
            assert not any(policy_peer_admits_everyone(p) for p in peers), \
                "the admin port %d must not be open to every source: %s" % (admin_port, rule)


def test_sidecar_app_uses_the_proxy():
    m = Manifest(os.path.join(K8S, "sidecar.yaml"))
    config = m.config()
    listen = config["proxy"]["listen"]
    assert all(ipaddress.ip_address(host_port(a)[0]).is_loopback for a in listen), (
        "a sidecar's proxy port needs no more than the Pod's loopback")
    host, port = host_port(listen[0])
    app = [c for c in m.pod["containers"] if c["name"] == "app"][0]
    env = {e["name"]: e.get("value") for e in app["env"]}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        assert env[name] == "http://%s:%d" % (host, port), name
    assert "NO_PROXY" in env and "no_proxy" in env
    # interception: the app trusts a bundle, and never mounts the CA key
    assert "tls" in config
    for name in ("SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE"):
        assert env[name].startswith("/etc/authproxy-trust/")
    for mnt in app["volumeMounts"]:
        vol = m.volume(mnt["name"])
        assert "secret" not in vol, "the app container must not mount the proxy's secrets"
    # a sidecar's clients all come from 127.0.0.1: the per-address limit must not be a quarter
    assert config["proxy"]["max_connections_per_client"] == config["proxy"]["max_connections"]


def test_shared_proxy_service_and_clients():
    m = Manifest(os.path.join(K8S, "shared-proxy.yaml"))
    config = m.config()
    ap = m.authproxy()
    labels = m.deployment["spec"]["template"]["metadata"]["labels"]
    svc = m.one("Service")
    assert svc["spec"]["selector"].items() <= labels.items()
    proxy_port = host_port(config["proxy"]["listen"][0])[1]
    admin_port = host_port(config["admin"]["listen"])[1]
    targets = [container_port(ap, p["targetPort"]) for p in svc["spec"]["ports"]]
    assert targets == [proxy_port], "the Service exposes the proxy port only"
    assert admin_port not in targets
    pdb = m.one("PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert m.deployment["spec"]["replicas"] > pdb["spec"]["minAvailable"]
    # who may use it: the pod network, and proxy authentication with passwords from the Secret
    assert config["proxy"]["allow_clients"]
    assert not networks_cover(config["proxy"]["allow_clients"], "0.0.0.0/0")
    clients = config["client"]
    assert len(clients) >= 2
    names = {c["name"] for c in config["credential"]}
    for c in clients:
        assert c["password"].startswith("file:")
        assert set(c["credentials"]) <= names


def test_k8s_configs_pass_check(manifest, tmp_path):
    path = write_config(manifest, str(tmp_path))
    out = run_check(path)
    assert "state_key:                set" in out


def test_k8s_configs_serve(manifest, tmp_path):
    """Start the embedded configuration (CA loaded, state_dir written) on free loopback ports."""
    root = str(tmp_path)
    path = write_config(manifest, root)
    text = open(path).read()
    port, admin = harness.free_port(), harness.free_port()
    text = re.sub(r'(?m)^listen = \[.*\]$', 'listen = ["127.0.0.1:%d"]' % port, text, count=1)
    text = re.sub(r'(?m)^listen = "0\.0\.0\.0:9128"$', 'listen = "127.0.0.1:%d"' % admin, text, count=1)
    # the shared proxy serves the pod network only; let the test's loopback client in
    text = re.sub(r'(?m)^allow_clients = \[', 'allow_clients = ["127.0.0.0/8", ', text, count=1)
    # nothing in flight to wait for; keep the stop quick even if a prefetch is still trying gis.example.com
    text = re.sub(r'(?m)^shutdown_grace_seconds = \d+', 'shutdown_grace_seconds = 2', text, count=1)
    with open(path, "w") as f:
        f.write(text)
    p = harness.Proxy(harness.proxy_bin(), path, os.path.join(root, "proxy.log"), "127.0.0.1", port)
    try:
        p.start()
        assert harness.healthz("127.0.0.1", port)[0] == 200
    finally:
        rc = p.stop(grace=30)
    assert rc == 0, p.log_text()[-3000:]


# ---------------------------------------------------------------------------
# Compose
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compose():
    return load_docs(COMPOSE)[0]


def compose_volume_sources(service):
    out = []
    for v in service.get("volumes", []):
        src, target = v.split(":")[:2] if isinstance(v, str) else (v["source"], v["target"])
        out.append((src, target, isinstance(v, str) and v.endswith(":ro")))
    return out


def test_compose_references(compose):
    services = compose["services"]
    assert {"authproxy", "app"} <= set(services)
    for name, s in services.items():
        for net in (s.get("networks") or {}):
            assert net in compose["networks"], (name, net)
        for sec in s.get("secrets", []):
            assert (sec if isinstance(sec, str) else sec["source"]) in compose["secrets"], (name, sec)
        for src, target, _ in compose_volume_sources(s):
            if src.startswith((".", "/")):
                assert os.path.exists(os.path.join(DEPLOY, src)), (name, src)
            else:
                assert src in compose.get("volumes", {}), (name, src)
        for dep in (s.get("depends_on") or {}):
            assert dep in services
    for name, sec in compose["secrets"].items():
        assert "file" in sec, name


def test_compose_isolation_and_hardening(compose):
    ap, app = compose["services"]["authproxy"], compose["services"]["app"]
    internal = [n for n, d in compose["networks"].items() if d and d.get("internal")]
    assert len(internal) == 1
    assert list(app["networks"]) == internal, "the app only on the internal network"
    assert internal[0] in ap["networks"] and len(ap["networks"]) == 2
    assert app["depends_on"]["authproxy"]["condition"] == "service_healthy"
    assert ap["read_only"] is True and ap["cap_drop"] == ["ALL"]
    assert ap["user"].split(":")[0] == str(IMAGE_UID)
    assert "no-new-privileges:true" in ap["security_opt"]
    assert ap["ulimits"]["nofile"]["hard"] >= 20000
    assert ap["healthcheck"]["test"][0] == "CMD"


def compose_config_path(compose):
    args = compose["services"]["authproxy"]["command"]
    path = args[args.index("--config") + 1]
    for src, target, ro in compose_volume_sources(compose["services"]["authproxy"]):
        if path.startswith(target.rstrip("/") + "/"):
            assert ro, "mount the configuration read-only"
            return os.path.join(DEPLOY, src, path[len(target.rstrip("/")) + 1:])
    raise AssertionError("no volume provides " + path)


def test_compose_config_matches(compose):
    config = tomllib.load(open(compose_config_path(compose), "rb"))
    ap = compose["services"]["authproxy"]
    subnet = [n for n, d in compose["networks"].items() if d and d.get("internal")][0]
    subnet = compose["networks"][subnet]["ipam"]["config"][0]["subnet"]
    assert networks_cover(config["proxy"]["allow_clients"], subnet)
    port = host_port(config["proxy"]["listen"][0])[1]
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        assert compose["services"]["app"]["environment"][k] == "http://authproxy:%d" % port
    # the healthcheck asks the admin listener for readiness
    admin = config["admin"]["listen"]
    assert "http://%s/readyz" % admin in ap["healthcheck"]["test"]
    assert ipaddress.ip_address(host_port(admin)[0]).is_loopback
    # every file: secret is a compose secret of this service, and the state is on a volume
    secrets = set(ap["secrets"])
    for ref in file_refs(config):
        assert ref.startswith("/run/secrets/") and ref[len("/run/secrets/"):] in secrets, ref
    targets = [t for src, t, _ in compose_volume_sources(ap) if src in compose.get("volumes", {})]
    assert config["proxy"]["state_dir"] in targets
    assert config["proxy"]["watch_config"] is True
    assert any(c.get("prefetch") for c in config["credential"])


def test_compose_config_passes_check(compose, tmp_path):
    root = str(tmp_path)
    secrets = os.path.join(root, "run", "secrets")
    os.makedirs(secrets)
    for name in compose["services"]["authproxy"]["secrets"]:
        with open(os.path.join(secrets, name), "w") as f:
            f.write("placeholder-%s-0123456789\n" % name)
    text, unmatched = rewrite_paths(open(compose_config_path(compose)).read(),
                                    {"/run/secrets": secrets, "/var/lib/authproxy": os.path.join(root, "state")})
    assert not unmatched, unmatched
    path = os.path.join(root, "proxy.conf")
    with open(path, "w") as f:
        f.write(text)
    run_check(path)


# ---------------------------------------------------------------------------
# systemd
# ---------------------------------------------------------------------------

def unit_directives():
    out = {}
    for line in open(UNIT):
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        k, _, v = line.partition("=")
        out.setdefault(k, []).append(v)
    return out


def test_systemd_unit_hardening():
    d = unit_directives()
    expect = {"DynamicUser": "yes", "ProtectSystem": "strict", "StateDirectory": "authproxy",
              "ConfigurationDirectory": "authproxy", "NoNewPrivileges": "yes", "PrivateTmp": "yes",
              "ProtectHome": "yes", "CapabilityBoundingSet": "", "ExecReload": "/bin/kill -HUP $MAINPID"}
    for k, v in expect.items():
        assert d.get(k) == [v], (k, d.get(k))
    assert d["SystemCallFilter"][0] == "@system-service"
    assert int(d["LimitNOFILE"][0]) >= 20000
    assert d["RestrictAddressFamilies"]


def test_systemd_config_matches_unit():
    d = unit_directives()
    config = tomllib.load(open(SYSTEMD_CONF, "rb"))
    assert config["proxy"]["state_dir"] == "/var/lib/" + d["StateDirectory"][0]
    execstart = d["ExecStart"][0].split()
    assert execstart[execstart.index("--config") + 1].startswith("/etc/" + d["ConfigurationDirectory"][0] + "/")
    creds = {v.split(":", 1)[0] for v in d.get("LoadCredential", [])}
    prefix = "/run/credentials/%s/" % os.path.basename(UNIT)
    for ref in file_refs(config):
        assert ref.startswith(prefix) and ref[len(prefix):] in creds, ref


def test_systemd_config_passes_check(tmp_path):
    d = unit_directives()
    root = str(tmp_path)
    creds = os.path.join(root, "credentials")
    os.makedirs(creds)
    for v in d["LoadCredential"]:
        with open(os.path.join(creds, v.split(":", 1)[0]), "w") as f:
            f.write("placeholder-credential-0123456789\n")
    text, unmatched = rewrite_paths(open(SYSTEMD_CONF).read(), {
        "/run/credentials/%s" % os.path.basename(UNIT): creds,
        "/var/lib/authproxy": os.path.join(root, "state")})
    assert not unmatched, unmatched
    path = os.path.join(root, "proxy.conf")
    with open(path, "w") as f:
        f.write(text)
    run_check(path)


def systemd_analyze():
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    return exe


def test_systemd_analyze_verify(tmp_path):
    exe = systemd_analyze()
    binary = os.path.abspath(harness.proxy_bin())
    assert os.path.isfile(binary), binary
    text = open(UNIT).read()
    assert "ExecStart=/usr/local/bin/authproxy " in text
    unit = tmp_path / "authproxy.service"
    unit.write_text(text.replace("ExecStart=/usr/local/bin/authproxy ", "ExecStart=%s " % binary))
    r = subprocess.run([exe, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    # verify also prints warnings (unknown directives, bad values) without failing
    assert "authproxy.service" not in r.stdout + r.stderr, r.stdout + r.stderr
    # the exposure score, computed offline (systemd >= 250; Debian 12 has 252)
    r = subprocess.run([exe, "security", "--offline=yes", str(unit)], capture_output=True, text=True,
                       timeout=60)
    m = re.search(r"Overall exposure level for authproxy\.service: ([0-9.]+)", r.stdout)
    assert m, "no exposure score (exit %d): %s" % (r.returncode, (r.stdout + r.stderr)[-3000:])
    assert float(m.group(1)) <= 2.0, r.stdout[-3000:]


def expand_syscall_group(exe, group, seen=None):
    seen = set() if seen is None else seen
    out = subprocess.run([exe, "syscall-filter", group], capture_output=True, text=True, timeout=60).stdout
    names = set()
    for line in out.splitlines()[1:]:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("@"):
            if line not in seen:
                seen.add(line)
                names |= expand_syscall_group(exe, line, seen)
        else:
            names.add(line)
    return names


def traced_pid(strace_proc):
    out = subprocess.run(["pgrep", "-P", str(strace_proc.pid)], capture_output=True, text=True).stdout
    return int(out.split()[0])


def test_syscalls_inside_the_unit_filter(tmp_path, origin):
    """authproxy serving (a relayed request with a credential, a blind CONNECT, SIGTERM) uses
    only system calls in SystemCallFilter=@system-service and sockets of RestrictAddressFamilies=."""
    exe = systemd_analyze()
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed")
    if subprocess.run([strace, "-o", "/dev/null", "true"], capture_output=True).returncode != 0:
        pytest.skip("ptrace is not permitted here")
    d = unit_directives()
    allowed, denied = set(), set()
    for line in d["SystemCallFilter"]:
        for group in line.lstrip("~").split():
            (denied if line.startswith("~") else allowed).update(expand_syscall_group(exe, group))
    allowed -= denied
    families = set(d["RestrictAddressFamilies"][0].split())

    root = str(tmp_path)
    port = harness.free_port()
    conf = os.path.join(root, "proxy.conf")
    with open(conf, "w") as f:
        f.write('[proxy]\nlisten = ["127.0.0.1:%d"]\nstate_dir = "%s"\nconnect_ports = [%d]\n'
                'deny_destinations = []\nwatch_config = true\n'
                '[[credential]]\nname = "k"\ntype = "api-key"\nkey = "secret-key"\nmatch = "%s"\n'
                % (port, os.path.join(root, "state"), origin.port, origin.url))
    trace = os.path.join(root, "strace.out")
    log = open(os.path.join(root, "proxy.log"), "wb")
    proc = subprocess.Popen([strace, "-f", "-qq", "-o", trace, harness.proxy_bin(), "serve", "--config", conf],
                            stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=harness.clean_env(),
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if harness.healthz("127.0.0.1", port)[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "authproxy did not start under strace"
            time.sleep(0.1)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", origin.url + "/json?f=json")
        r = conn.getresponse()
        r.read()
        conn.close()
        assert r.status == 200
        # a host name: libcurl's resolver (getaddrinfo) runs too
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "http://localhost:%d/json" % origin.port)
        r = conn.getresponse()
        r.read()
        conn.close()
        assert r.status == 200
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(("CONNECT localhost:%d HTTP/1.1\r\nHost: localhost:%d\r\n\r\n"
                       % (origin.port, origin.port)).encode())
            assert b" 200 " in s.recv(4096).split(b"\r\n")[0] + b" "
            s.sendall(b"GET /json HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n")
            while s.recv(65536):
                pass
        # authproxy is strace's child: signal it, so it shuts down on its own and strace sees all of it.
        # (Reload by SIGHUP is not exercised: watch_config in the configuration covers the file watching.)
        os.kill(traced_pid(proc), signal.SIGTERM)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            try:
                os.kill(traced_pid(proc), signal.SIGKILL)   # killing strace alone would leave it running
            except (IndexError, OSError):
                pass
            proc.kill()
            proc.wait(10)
        log.close()
    used, socket_families = set(), set()
    for line in open(trace):
        m = re.match(r"\d+\s+([a-z_0-9]+)\(", line)
        if m:
            used.add(m.group(1))
            if m.group(1) == "socket":
                socket_families.add(line.split("(", 1)[1].split(",", 1)[0])
    assert "epoll_wait" in used or "epoll_pwait" in used, "the trace looks empty"
    assert used <= allowed, "system calls outside %s: %s" % (d["SystemCallFilter"], sorted(used - allowed))
    assert "AF_UNIX" in socket_families, "the host name lookup (NSS) did not run"
    assert socket_families <= families, sorted(socket_families - families)
    if d.get("MemoryDenyWriteExecute") == ["yes"]:
        # what systemd's filter refuses: mappings both writable and executable, or made executable later
        wx = [l for l in open(trace) if re.match(r"\d+\s+(mmap|mprotect|pkey_mprotect)\(", l)
              and "PROT_EXEC" in l and ("PROT_WRITE" in l or "mprotect" in l)]
        assert not wx, wx[:5]
