"""CLI: --version, check, config errors, ${ENV} / file: resolution."""

import json
import os
import re
import shutil
import subprocess
import tempfile

import pytest

import harness


def _good_config(tmp_path, port=None):
    port = port or harness.free_port()
    text = harness.render_config(harness.default_proxy_section(port, str(tmp_path / "state")),
                                 harness.default_log_section())
    p = tmp_path / "good.toml"
    p.write_text(text)
    return p, port


def test_version(proxy_binary):
    r = harness.run_cli(["--version"])
    assert r.returncode == 0, r.stderr
    assert re.search(r"\d+\.\d+", r.stdout + r.stderr), (r.stdout, r.stderr)


def test_check_good_config(proxy_binary, tmp_path):
    cfg, port = _good_config(tmp_path)
    r = harness.run_cli(["check", "--config", str(cfg)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() or r.stderr.strip(), "check should print a summary"


BAD_CONFIGS = {
    # name: (config text with {port}, expected key substring, allowed line numbers)
    "unknown_key": (
        '[proxy]\nlisten = ["127.0.0.1:{port}"]\nconnect_ports = [443]\nbogus_key = 1\n'
        '[log]\nlevel = "info"\n', "proxy.bogus_key", {4}),
    "listen_wrong_type": (
        '[proxy]\nlisten = 8080\n[log]\nlevel = "info"\n', "proxy.listen", {2}),
    "listen_element_wrong_type": (
        '[proxy]\nlisten = [8080]\n', "proxy.listen", {2}),
    "connect_ports_wrong_type": (
        '[proxy]\nlisten = ["127.0.0.1:{port}"]\n\nconnect_ports = ["443"]\n',
        "proxy.connect_ports", {4}),
    "timeout_wrong_type": (
        '[proxy]\nlisten = ["127.0.0.1:{port}"]\nupstream_timeout_seconds = "soon"\n',
        "proxy.upstream_timeout_seconds", {3}),
    "unmatched_bad_value": (
        '[proxy]\nlisten = ["127.0.0.1:{port}"]\nunmatched = "maybe"\n', "proxy.unmatched", {3}),
    "log_level_bad_value": (
        '[proxy]\nlisten = ["127.0.0.1:{port}"]\n[log]\nlevel = "loud"\n', "log.level", {4}),
    "log_unknown_key": (
        '[proxy]\nlisten = ["127.0.0.1:{port}"]\n[log]\nlevel = "info"\ncolour = true\n',
        "log.colour", {5}),
    "misspelt_required_key": (
        '[proxy]\nlisten = ["127.0.0.1:{port}"]\n[[credential]]\nname = "a"\ntype = "arcgis-token"\n'
        'match = "https://gis.example.com/arcgis"\nusername = "u"\npasword = "p"\n', "credential[0].pasword", {8}),
    "doctor_placeholder_left": (
        '[proxy]\nlisten = ["127.0.0.1:{port}"]\n[[credential]]\nname = "a"\ntype = "arcgis-token"\n'
        'match = "https://gis.example.com/arcgis"\nusername = "REPLACE_ME"\npassword = "p"\n',
        "credential[0].username", {7}),
    "unknown_section": (
        '[proxy]\nlisten = ["127.0.0.1:{port}"]\n\n[nope]\nx = 1\n', "nope", {4, 5}),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_check_rejects_bad_config(proxy_binary, tmp_path, case):
    text, key, lines = BAD_CONFIGS[case]
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text.replace("{port}", str(harness.free_port())))
    r = harness.run_cli(["check", "--config", str(cfg)])
    assert r.returncode != 0, "check accepted a bad config:\n%s\n%s" % (text, r.stdout)
    assert key in r.stderr, "stderr should name %r: %r" % (key, r.stderr)
    found = {int(m) for m in re.findall(r"line\s+(\d+)", r.stderr)}
    assert found & lines, "stderr should name line %s: %r" % (sorted(lines), r.stderr)


def test_check_rejects_toml_syntax_error(proxy_binary, tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[proxy]\nlisten = ["127.0.0.1:1"\nconnect_ports = [443]\n')
    r = harness.run_cli(["check", "--config", str(cfg)])
    assert r.returncode != 0
    assert re.search(r"line\s+\d+", r.stderr), r.stderr


def test_check_missing_file(proxy_binary, tmp_path):
    r = harness.run_cli(["check", "--config", str(tmp_path / "missing.toml")])
    assert r.returncode != 0
    assert r.stderr.strip()


def _tls_config(tmp_path, cert, key):
    port = harness.free_port()
    text = harness.render_config(harness.default_proxy_section(port, str(tmp_path / "state")),
                                 harness.default_log_section())
    text += '\n[tls]\nca_cert = "%s"\nca_key = "%s"\n' % (cert, key)
    p = tmp_path / "tls.toml"
    p.write_text(text)
    return p


def _serve_exit(proxy_binary, cfg):
    p = subprocess.run([proxy_binary, "serve", "--config", str(cfg)], capture_output=True, text=True,
                       env=harness.clean_env(), stdin=subprocess.DEVNULL, timeout=20)
    return p.returncode, p.stderr + p.stdout


def test_check_and_serve_refuse_missing_or_mismatched_interception_ca(proxy_binary, tmp_path):
    """`check` loads the [tls] CA as `serve` does: a missing file or a key of another CA is a configuration error
    (exit 2) for both, and nothing is printed as valid."""
    for name in ("a", "b"):
        r = harness.run_cli(["ca", "init", "--dir", str(tmp_path / name)])
        assert r.returncode == 0, r.stderr
    good = _tls_config(tmp_path, tmp_path / "a" / "ca.pem", tmp_path / "a" / "ca.key")
    r = harness.run_cli(["check", "--config", str(good)])
    assert r.returncode == 0, r.stderr
    assert "interception ([tls]):     on" in r.stdout, r.stdout
    cases = {
        "missing": (tmp_path / "nope" / "ca.pem", tmp_path / "nope" / "ca.key", "cannot read CA certificate"),
        "mismatched": (tmp_path / "a" / "ca.pem", tmp_path / "b" / "ca.key", "does not belong to"),
    }
    for name, (cert, key, says) in cases.items():
        cfg = _tls_config(tmp_path, cert, key)
        r = harness.run_cli(["check", "--config", str(cfg)])
        assert r.returncode == 2, (name, r.returncode, r.stdout, r.stderr)
        assert says in r.stderr and "[tls]" in r.stderr, (name, r.stderr)
        assert "is valid" not in r.stdout, (name, r.stdout)
        code, out = _serve_exit(proxy_binary, cfg)
        assert code == 2, (name, code, out)
        assert says in out, (name, out)


def test_check_warns_about_an_expired_pregenerated_token_and_lists_placement_only_for_tokens(proxy_binary,
                                                                                            tmp_path):
    cfg = tmp_path / "expired.toml"
    cfg.write_text(harness.render_config(harness.default_proxy_section(harness.free_port(), str(tmp_path / "st")),
                                         harness.default_log_section())
                   + harness.cred("old", "token", "https://gis.example.com/arcgis", token="T", expires="2001-01-01T00:00:00Z")
                   + harness.cred("trust", "server-trust", "https://gis.example.com", insecure=True))
    r = harness.run_cli(["check", "--config", str(cfg)])
    assert r.returncode == 0, r.stderr
    assert "warning: credential 'old': its pregenerated token expired" in r.stderr, r.stderr
    assert re.search(r"- old \(token, token_placement=param\)", r.stdout), r.stdout
    assert re.search(r"- trust \(server-trust\): ", r.stdout), r.stdout


def test_an_encrypted_interception_ca_key_is_refused_at_once_without_a_passphrase_prompt(proxy_binary, tmp_path):
    """OpenSSL asks for a passphrase on the terminal when none is given: `check` and `serve` started from a shell
    waited for input. Now an encrypted ca.key is a configuration error, said at once."""
    import pty
    r = harness.run_cli(["ca", "init", "--dir", str(tmp_path / "ca")])
    assert r.returncode == 0, r.stderr
    enc = tmp_path / "ca" / "encrypted.key"
    o = subprocess.run(["openssl", "pkey", "-in", str(tmp_path / "ca" / "ca.key"), "-aes256", "-passout", "pass:pw",
                        "-out", str(enc)], capture_output=True, text=True)
    assert o.returncode == 0, o.stderr
    cfg = _tls_config(tmp_path, tmp_path / "ca" / "ca.pem", enc)
    primary, secondary = pty.openpty()
    try:
        r = subprocess.run([proxy_binary, "check", "--config", str(cfg)], stdin=secondary, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=harness.clean_env(), timeout=20)
    finally:
        os.close(primary)
        os.close(secondary)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "is encrypted" in r.stderr, r.stderr


def test_check_warns_when_tokens_could_not_be_saved_in_state_dir(proxy_binary, tmp_path):
    """A relative state_dir resolved from "/" by an unprivileged user (a container image's user with a mounted
    config) cannot be created: serve would start, but every token save would fail. check says so (found by a
    README walk-through)."""
    good = _good_config(tmp_path)[0]
    r = harness.run_cli(["check", "--config", str(good)])
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    if os.geteuid() != 0:
        pytest.skip("needs root to run check as another user")
    shared = tempfile.mkdtemp(prefix="authproxy-state-check-")
    try:
        os.chmod(shared, 0o755)
        cfg = os.path.join(shared, "proxy.conf")
        with open(cfg, "w") as f:
            f.write(good.read_text().replace(str(tmp_path / "state"), "./state"))
        os.chmod(cfg, 0o644)
        r = subprocess.run([proxy_binary, "check", "--config", cfg], capture_output=True, text=True,
                           cwd="/", env=harness.clean_env(), stdin=subprocess.DEVNULL, timeout=20,
                           user=65534, group=65534)
        assert r.returncode == 0, r.stderr
        assert "warning: state_dir ./state: cannot be created in ." in r.stderr, r.stderr
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@pytest.mark.parametrize("case", ["unknown_key", "listen_wrong_type"])
def test_serve_rejects_bad_config(proxy_binary, tmp_path, case):
    text, key, lines = BAD_CONFIGS[case]
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text.replace("{port}", str(harness.free_port())))
    p = subprocess.Popen([proxy_binary, "serve", "--config", str(cfg)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=harness.clean_env(),
                         stdin=subprocess.DEVNULL)
    try:
        out, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail("serve kept running with an invalid config")
    assert p.returncode != 0
    assert key in err and re.search(r"line\s+\d+", err), err


def test_bare_config_flag_serves(proxy_factory, origin):
    p = proxy_factory(args=["--config", "{config}"])
    r, data = harness.fetch(p, "GET", origin.url + "/json")
    assert r.status == 200


def test_env_and_file_resolution(proxy_factory, origin, tmp_path):
    port = harness.free_port()
    fmt_file = tmp_path / "format.txt"
    fmt_file.write_text("  json \n")
    state_file = tmp_path / "statedir.txt"
    state_file.write_text(str(tmp_path / "state-from-file") + "\n")
    text = (
        '[proxy]\n'
        'listen = ["${AUTHPROXY_E2E_LISTEN}"]\n'
        'connect_ports = [443]\n'
        'unmatched = "${AUTHPROXY_E2E_UNMATCHED}"\n'
        'state_dir = "file:%s"\n'
        '[log]\n'
        'level = "info"\n'
        'format = "file:%s"\n' % (state_file, fmt_file))
    p = proxy_factory(raw_config=text, ready_port=port,
                      env={"AUTHPROXY_E2E_LISTEN": "127.0.0.1:%d" % port,
                           "AUTHPROXY_E2E_UNMATCHED": "relay"})
    assert p.port == port
    r, data = harness.fetch(p, "GET", origin.url + "/json")
    assert r.status == 200
    lines = p.wait_for_log(lambda l: "access" in l, timeout=3)
    assert lines
    import json
    for line in p.log_lines():
        json.loads(line)  # format came from the file: every line is JSON

    # check resolves the same way
    cfg = tmp_path / "envcheck.toml"
    cfg.write_text(text)
    r = harness.run_cli(["check", "--config", str(cfg)],
                        env=harness.clean_env({"AUTHPROXY_E2E_LISTEN": "127.0.0.1:%d" % port,
                                               "AUTHPROXY_E2E_UNMATCHED": "relay"}))
    assert r.returncode == 0, r.stderr


def test_listen_from_file(proxy_factory, origin, tmp_path):
    port = harness.free_port()
    f = tmp_path / "listen.txt"
    f.write_text("127.0.0.1:%d\n" % port)
    text = '[proxy]\nlisten = ["file:%s"]\nstate_dir = "%s"\n' % (f, tmp_path / "st")
    p = proxy_factory(raw_config=text, ready_port=port)
    r, _ = harness.fetch(p, "GET", origin.url + "/json")
    assert r.status == 200


def test_shipped_example_config_is_valid():
    """proxy.conf.example is what the README's run command and the Dockerfile use."""
    example = os.path.join(os.path.dirname(__file__), "..", "..", "proxy.conf.example")
    r = harness.run_cli(["check", "--config", example])
    assert r.returncode == 0, r.stderr
    assert "127.0.0.1:3128" in r.stdout


def test_example_credentials_are_valid_when_uncommented(tmp_path):
    """Every commented [[credential]] example in proxy.conf.example is a working configuration."""
    example = os.path.join(os.path.dirname(__file__), "..", "..", "proxy.conf.example")
    lines = []
    keys = ("[[credential]]", "name ", "type ", "key ", "keys ", "match ", "token ", "referer ", "expires ", "username ",
            "password ", "client_id ", "client_secret ", "portal_url ", "redirect_uri ", "expiration_minutes ",
            "token_url ", "ca_file ", "rate_limit ", "[[client]]", "credentials ", "issuer ", "layer ", "grant ",
            "audience ", "service_account_file ", "target_audience ", "subject_token_file ", "token_placement ")
    secret = tmp_path / "token.txt"
    secret.write_text("pregenerated-token\n")
    key = subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
                         capture_output=True, check=True, timeout=60).stdout.decode()
    account = tmp_path / "sa.json"
    account.write_text(json.dumps({"type": "service_account", "client_email": "sa@p.iam.gserviceaccount.com",
                                   "private_key": key, "token_uri": "https://oauth2.googleapis.com/token"}))
    network = False
    for line in open(example):
        # Network credentials need real files (keytab, .p12): the token and trust examples are checked here.
        network = network or line.startswith("# Network authentication")
        if line.startswith("# Users of the proxy"):
            network = False  # the [[client]] examples are checked too
        if not network and line.startswith("# ") and line[2:].startswith(keys):
            line = line[2:]
        lines.append(line.replace("file:/run/secrets/arcgis-token", "file:%s" % secret)
                     .replace("/etc/authproxy/internal-ca.pem", str(secret))
                     .replace("/etc/authproxy/iap-sa.json", str(account))
                     .replace("/var/run/secrets/tokens/gcp-ksa/token", str(secret))
                     .replace("file:/run/secrets/ops-proxy-password", "file:%s" % secret))
    conf = tmp_path / "uncommented.conf"
    conf.write_text("".join(lines))
    env = harness.clean_env({"ARCGIS_KEY_1": "k1", "ARCGIS_KEY_2": "k2", "GIS_PASSWORD": "p", "ARCGIS_CLIENT_SECRET": "s",
                             "TEAM_A_PROXY_PASSWORD": "pw", "KEYCLOAK_CLIENT_SECRET": "s"})
    r = harness.run_cli(["check", "--config", str(conf)], env=env)
    assert r.returncode == 0, r.stderr
    assert "credentials:              9" in r.stdout, r.stdout
    assert "iap (oauth2, layer=gateway (applied with the service credential), token_placement=proxy-authorization)" \
        in r.stdout, r.stdout
    assert "rate_limit=600/60s" in r.stdout, r.stdout
    assert "2 client(s): team-a [location-services, enterprise]; ops" in r.stdout, r.stdout
    for secret_value in ("pregenerated-token", "${GIS_PASSWORD}"):
        assert secret_value not in r.stdout


def test_dockerfile_config_is_valid_and_not_an_open_relay(tmp_path):
    """The image's config is proxy.conf.example edited by the Dockerfile's sed expressions: apply the same
    expressions here (no Docker engine needed) and check the result, and that the listen edit alone would be
    refused as an open relay."""
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    dockerfile = open(os.path.join(root, "Dockerfile")).read()
    exprs = re.findall(r"-e '([^']+)'", dockerfile)
    assert any("allow_clients" in e for e in exprs) and any("0.0.0.0:3128" in e for e in exprs), exprs
    conf = tmp_path / "proxy.conf"
    shutil.copy(os.path.join(root, "proxy.conf.example"), conf)
    subprocess.run(["sed", "-i"] + [a for e in exprs for a in ("-e", e)] + [str(conf)], check=True)
    r = harness.run_cli(["check", "--config", str(conf)])
    assert r.returncode == 0, r.stderr
    assert "0.0.0.0:3128" in r.stdout and "allow_clients:            127.0.0.0/8, ::1/128\n" in r.stdout, r.stdout
    listen_only = tmp_path / "listen-only.conf"
    shutil.copy(os.path.join(root, "proxy.conf.example"), listen_only)
    subprocess.run(["sed", "-i", "-e", [e for e in exprs if "0.0.0.0:3128" in e][0], str(listen_only)], check=True)
    r = harness.run_cli(["check", "--config", str(listen_only)])
    assert r.returncode == 2 and "open relay" in r.stderr, (r.returncode, r.stderr)


# --- default workers: the CPUs the process may use, not the host's --------------------------------------------

def _workers_line(stdout):
    m = re.search(r"^\s*workers:\s+(\d+)(.*)$", stdout, re.M)
    assert m, stdout
    return int(m.group(1)), m.group(2)


def _check_on_one_cpu(cfg, cpu):
    """`authproxy check` with its affinity mask narrowed to `cpu`."""
    return subprocess.run([harness.proxy_bin(), "check", "--config", str(cfg)], capture_output=True, text=True,
                          timeout=30, env=harness.clean_env(), stdin=subprocess.DEVNULL,
                          preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))


def test_default_workers_follow_the_affinity_mask(proxy_binary, tmp_path):
    """Under `taskset -c 0` the default counts one usable CPU (2 loops per usable CPU, at least 4), not the host's
    online CPUs; check says why."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs at least 2 usable CPUs to narrow the affinity mask")
    cfg, _ = _good_config(tmp_path)
    r = harness.run_cli(["check", "--config", str(cfg)])
    assert r.returncode == 0, r.stdout + r.stderr
    full, _ = _workers_line(r.stdout)
    assert full == harness.default_workers(len(os.sched_getaffinity(0))), r.stdout
    one = sorted(os.sched_getaffinity(0))[0]
    pinned = _check_on_one_cpu(cfg, one)
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    n, why = _workers_line(pinned.stdout)
    assert n == harness.default_workers(1), pinned.stdout
    assert "1 usable CPU" in why and "affinity 1" in why, why
    # An explicit value wins, and says nothing about defaults.
    text = cfg.read_text().replace("[proxy]\n", "[proxy]\nworkers = 3\n", 1)
    cfg.write_text(text)
    r = _check_on_one_cpu(cfg, one)
    assert _workers_line(r.stdout) == (3, ""), r.stdout


def _cpu_limited_cgroup(tmp_name, quota_us, period_us=100000):
    """A control group limited to quota/period CPUs (cgroup v1 `cpu` or v2 `cpu.max`), or None when this machine
    does not let the tests make one. Returns (procs file, cleanup)."""
    mounts = [line.split() for line in open("/proc/self/mountinfo")]
    for f in mounts:
        dash = f.index("-")
        fstype, opts = f[dash + 1], f[dash + 3].split(",")
        point = f[4]
        if fstype == "cgroup" and "cpu" in opts:
            path = os.path.join(point, tmp_name)
            limit = [("cpu.cfs_period_us", str(period_us)), ("cpu.cfs_quota_us", str(quota_us))]
        elif fstype == "cgroup2" and os.path.exists(os.path.join(point, "cgroup.subtree_control")) \
                and "cpu" in open(os.path.join(point, "cgroup.subtree_control")).read().split():
            path = os.path.join(point, tmp_name)
            limit = [("cpu.max", "%d %d" % (quota_us, period_us))]
        else:
            continue
        try:
            os.mkdir(path)
            for name, value in limit:
                with open(os.path.join(path, name), "w") as fh:
                    fh.write(value)
        except OSError:
            try:
                os.rmdir(path)
            except OSError:
                pass
            continue
        return os.path.join(path, "cgroup.procs"), lambda p=path: os.rmdir(p)
    return None


def test_default_workers_follow_a_cgroup_cpu_limit(proxy_binary, tmp_path):
    """A container CPU limit (`--cpus 0.5`, Kubernetes `limits.cpu: 500m`) is a cgroup quota: the default then
    counts one usable CPU, and `check` names the limit. The proxy is started inside a real control group with that
    quota."""
    made = _cpu_limited_cgroup("authproxy-test-%d" % os.getpid(), 50000)
    if made is None:
        pytest.skip("cannot create a CPU-limited control group here (needs root and a writable cpu controller)")
    procs, cleanup = made
    try:
        cfg, _ = _good_config(tmp_path)
        r = subprocess.run(["sh", "-c", 'echo $$ > "$1" && shift && exec "$@"', "sh", procs, harness.proxy_bin(),
                            "check", "--config", str(cfg)],
                           capture_output=True, text=True, timeout=30, env=harness.clean_env(),
                           stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stdout + r.stderr
        n, why = _workers_line(r.stdout)
        assert n == harness.default_workers(1), r.stdout
        assert "1 usable CPU" in why and "cgroup limit 0.50 CPUs" in why, why
    finally:
        cleanup()
