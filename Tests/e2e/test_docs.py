"""The documentation cannot drift from the code or from itself.

- The configuration reference: every key the loader reads (`Sources/AuthProxyCore/Config/*.swift`, found by the
  reader calls `proxy.int("…")`, `entry.string("…")`, …) is documented in `docs/configuration.md` (per section,
  and per credential type) and shown in `proxy.conf.example` (commented lines count); every key those two and the
  TOML examples in the documentation show is one the loader reads.
- Every relative link and anchor in README.md, CONTRIBUTING.md, docs/ and deploy/README.md resolves, every page
  in docs/ is linked from the README, the README stays a front page (at most 300 lines), and long pages open
  with a table of contents.
"""

import os
import re
import tomllib

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONFIG_SOURCES = os.path.join(ROOT, "Sources", "AuthProxyCore", "Config")
KIND_SOURCES = os.path.join(ROOT, "Sources", "AuthProxyCore", "Credentials", "Kinds")
CONFIG_DOC = os.path.join(ROOT, "docs", "configuration.md")
EXAMPLE = os.path.join(ROOT, "proxy.conf.example")

# ---------------------------------------------------------------------------
# What the loader reads
# ---------------------------------------------------------------------------

# The TableReader methods that take a key (ConfigLoader.swift), and the helpers parseCredential and parseOAuth2
# define around them (`required("username")`, `url("token_url", …)`, `readable("private_key")`,
# `sendableToken("key")`, `urlList("sign_in_urls")`).
READER_METHODS = ("string", "int", "bool", "enumValue", "stringArray", "addressBlocks", "stringOrArray", "intArray",
                  "table", "tableArray", "literalString", "verbatimString", "markUsed", "dateTime")
HELPERS = ("required", "url", "readable", "sendableToken", "urlList", "number")
READ = re.compile(r"(?:\b(\w+)\??\.)?\b(%s)\(\"([a-z_]+)\"" % "|".join(READER_METHODS + HELPERS))
FUNC = re.compile(r"^\s*(?:(?:private|public|fileprivate|static|mutating)\s+)*func (\w+)\(")
TYPE_CASE = re.compile(r'^\s*case "([a-z0-9-]+)":')

# Receivers whose name is the section they read.
SECTION_RECEIVERS = {"proxy": "proxy", "log": "log", "admin": "admin", "tls": "tls"}


def loader_keys():
    """{section: set of keys}, and {credential type: set of keys} for the keys one type alone reads.

    Sections: proxy, log, admin, tls, cluster, client, credential (keys every type reads), credential.rate_limit.
    A read this function cannot attribute fails the test: a new way of reading keys must be taught here rather
    than let keys go unchecked."""
    sections, types = {}, {}
    unattributed = []
    for name in sorted(os.listdir(CONFIG_SOURCES)):
        if not name.endswith(".swift"):
            continue
        func, ctype = None, None
        for lineno, line in enumerate(open(os.path.join(CONFIG_SOURCES, name), encoding="utf-8"), 1):
            m = FUNC.match(line)
            # Nested helpers (required, url, readable, fail, …) do not change the function being read.
            if m and m.group(1) not in HELPERS + ("fail", "checkedReferer", "checkedKey"):
                func, ctype = m.group(1), None
            if func == "parseCredential":
                c = TYPE_CASE.match(line)
                if c:
                    ctype = c.group(1)
                if "entry.finish()" in line:
                    ctype = None
            for receiver, method, key in READ.findall(line):
                where = "%s:%d" % (name, lineno)
                if receiver == "" and method not in HELPERS:
                    continue  # a pattern such as `case .string("invalid_token")`, not a read
                if receiver == "top":
                    sections.setdefault(key, set())
                elif receiver in SECTION_RECEIVERS:
                    sections.setdefault(SECTION_RECEIVERS[receiver], set()).add(key)
                elif func == "parseCluster" and receiver == "t":
                    sections.setdefault("cluster", set()).add(key)
                elif name == "ConfigLoader+Tracing.swift" and receiver in ("t", ""):
                    sections.setdefault("tracing", set()).add(key)
                elif func == "parseClients" and receiver == "entry":
                    sections.setdefault("client", set()).add(key)
                elif func in ("parseApps", "appCredentials") and receiver in ("entry", "rule"):
                    sections.setdefault("app", set()).add(key)  # [[app]] and its [[app.user_rule]]
                elif func == "parseUpstreamLimits" and receiver == "entry":
                    sections.setdefault("upstream", set()).add(key)
                elif func == "parseCredentialLimits" and receiver == "entry":
                    sections.setdefault("credential", set()).add(key)
                elif func == "parseConcurrency" and receiver == "entry":
                    # max_concurrent and its queue: keys of [[upstream]] and of [[credential]] alike.
                    sections.setdefault("upstream", set()).add(key)
                    sections.setdefault("credential", set()).add(key)
                elif receiver == "r" and func == "parseCredential":
                    sections.setdefault("credential.rate_limit", set()).add(key)
                elif func in ("parseOAuth2", "rejectionSignals"):
                    types.setdefault("oauth2", set()).add(key)
                elif func == "parseAPIKey":
                    types.setdefault("api-key", set()).add(key)
                elif func == "headerFields" and receiver == "entry":
                    types.setdefault("header", set()).add(key)
                elif func == "parseCredential" and (receiver == "entry" or method in HELPERS):
                    if ctype:
                        types.setdefault(ctype, set()).add(key)
                    else:
                        sections.setdefault("credential", set()).add(key)
                else:
                    unattributed.append("%s %s.%s(%r) in %s" % (where, receiver, method, key, func))
    # A credential kind's folder (Credentials/Kinds/<Kind>/) reads that kind's keys, whatever the function.
    for folder in sorted(os.listdir(KIND_SOURCES)):
        path = os.path.join(KIND_SOURCES, folder)
        texts = {n: open(os.path.join(path, n), encoding="utf-8").read()
                 for n in sorted(os.listdir(path)) if n.endswith(".swift")}
        names = [m for t in texts.values() for m in re.findall(r'static let typeName = "([a-z0-9-]+)"', t)]
        assert len(names) == 1, "%s declares %s typeName" % (folder, names or "no")
        for text in texts.values():
            for receiver, method, key in READ.findall(text):
                if receiver == "" and method not in HELPERS:
                    continue
                types.setdefault(names[0], set()).add(key)
    assert not unattributed, "reads test_docs.py cannot attribute to a section: %s" % unattributed
    return sections, types


# ---------------------------------------------------------------------------
# What docs/configuration.md documents
# ---------------------------------------------------------------------------

def table_rows(text):
    """The body rows of every Markdown table in `text`, as lists of cell strings."""
    rows = []
    for line in text.split("\n"):
        if line.startswith("|") and not re.match(r"^\|\s*-", line):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def documented():
    """({section: keys} from the `[section] key` rows, {type: keys} from the credential-type table)."""
    text = open(CONFIG_DOC, encoding="utf-8").read()
    sections, types = {}, {}
    for cells in table_rows(text):
        first = cells[0]
        m = re.match(r"^`\[\[?(\w+)\]\]?(?: (\w+))?`(.*)$", first)
        if m:
            section = m.group(1)
            keys = [m.group(2)] + re.findall(r"`(\w+)`", m.group(3)) if m.group(2) else []
            sections.setdefault(section, set()).update(keys)
            if section == "credential" and m.group(2) == "rate_limit":
                sections.setdefault("credential.rate_limit", set()).update(
                    re.findall(r"(\w+) = ", cells[2].split("per client")[0]))
            continue
        t = re.match(r"^`([a-z0-9-]+)`$", first)
        if t and len(cells) == 3 and ("credentials" in cells[2] or "https.md" in cells[2]):
            types[t.group(1)] = set(re.findall(r"`(\w+)`", cells[1]))
    return sections, types


# ---------------------------------------------------------------------------
# What proxy.conf.example and the TOML examples show
# ---------------------------------------------------------------------------

HEADER = re.compile(r"^#?\s*(\[\[?)([a-z_]+)\]\]?\s*(?:#.*)?$")
KEY = re.compile(r"^#?\s*([a-z_]+)\s*=\s*(\S.*)$")
TYPE_VALUE = re.compile(r'^"([a-z0-9-]+)"')


def shown_keys(text):
    """[(section, credential type or None, key)] for every key line, commented or not, in a TOML text.

    A `# ---` line starts a region; key lines in a region before its first section header (the options every
    credential takes, listed before the first example) belong to the section of that first header."""
    out = []
    blocks = []  # [section, type, [keys]]
    pending = []
    for line in text.split("\n"):
        if re.match(r"^#\s*-{10,}", line):
            pending = []
            blocks.append(None)
            continue
        h = HEADER.match(line)
        if h:
            blocks.append([h.group(2), None, pending])
            pending = []
            continue
        k = KEY.match(line)
        if not k:
            continue
        key, value = k.group(1), k.group(2)
        current = blocks[-1] if blocks else None
        if current is None:
            pending.append((key, value))
        else:
            current[2].append((key, value))
            if key == "type":
                t = TYPE_VALUE.match(value)
                current[1] = t.group(1) if t else None
    for b in blocks:
        if b is None:
            continue
        section, ctype, keys = b
        for key, value in keys:
            out.append((section, ctype, key))
            if key == "rate_limit" and value.startswith("{"):
                out += [("credential.rate_limit", None, sub) for sub in re.findall(r"(\w+)\s*=", value)]
    return out


def toml_blocks():
    """(file, block text) for every ```toml block in the documentation."""
    files = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "deploy", "README.md")]
    files += [os.path.join(ROOT, "docs", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs"))) if f.endswith(".md")]
    for path in files:
        text = open(path, encoding="utf-8").read()
        for block in re.findall(r"```toml\n(.*?)```", text, re.S):
            yield os.path.relpath(path, ROOT), block


def accepted(section, ctype, key, sections, types):
    if section == "credential":
        return key in sections["credential"] or (
            key in types.get(ctype, set()) if ctype else any(key in ks for ks in types.values()))
    return key in sections.get(section, set())


# ---------------------------------------------------------------------------
# Tests: the configuration reference
# ---------------------------------------------------------------------------

def test_loader_keys_are_found():
    """The extraction sees the loader: a few keys of each section are there (else everything below is vacuous)."""
    sections, types = loader_keys()
    assert {"listen", "workers", "upstream_proxy", "upstream_pac", "state_key"} <= sections["proxy"]
    assert {"level", "format"} <= sections["log"]
    assert {"listen", "allow", "hosts"} <= sections["admin"]
    assert {"ca_cert", "ca_key", "intercept", "no_intercept"} <= sections["tls"]
    assert {"redis", "timeout_ms", "required"} <= sections["cluster"]
    assert {"name", "password", "credentials"} <= sections["client"]
    assert {"name", "type", "match", "prefetch", "layer", "rate_limit"} <= sections["credential"]
    assert {"requests", "per_seconds"} <= sections["credential.rate_limit"]
    assert set(types) >= {"api-key", "token", "arcgis-token", "oauth-app", "oauth-user", "oauth2", "server-trust",
                          "password", "kerberos", "certificate", "header"}
    assert {"issuer", "rejection", "private_key"} <= types["oauth2"]
    assert types["header"] == {"headers"}


def test_every_loader_key_is_documented():
    sections, types = loader_keys()
    doc_sections, doc_types = documented()
    missing = sorted("[%s] %s" % (s, k) for s, keys in sections.items() for k in keys
                     if k not in doc_sections.get(s, set()))
    assert not missing, "read by the loader, not in docs/configuration.md: %s" % missing
    # A key every type takes (token_placement, which oauth2 reads itself) is documented once, in the common table.
    missing = sorted("%s: %s" % (t, k) for t, keys in types.items()
                     for k in keys - doc_types.get(t, set()) - doc_sections.get("credential", set()))
    assert not missing, "read by the loader, not in the credential types table of docs/configuration.md: %s" % missing


def test_every_documented_key_is_read():
    sections, types = loader_keys()
    doc_sections, doc_types = documented()
    extra = sorted("[%s] %s" % (s, k) for s, keys in doc_sections.items() for k in keys
                   if k not in sections.get(s, set()))
    assert not extra, "in docs/configuration.md, not read by the loader: %s" % extra
    assert set(doc_types) == set(types), "credential types documented vs. read"
    extra = sorted("%s: %s" % (t, k) for t, keys in doc_types.items() for k in keys - types.get(t, set()))
    assert not extra, "in the credential types table, not read by the loader for that type: %s" % extra


def test_every_loader_key_is_in_the_example():
    sections, types = loader_keys()
    shown = shown_keys(open(EXAMPLE, encoding="utf-8").read())
    by_section = {}
    for s, _, k in shown:
        by_section.setdefault(s, set()).add(k)
    credential_keys = by_section.get("credential", set())
    missing = sorted("[%s] %s" % (s, k) for s, keys in sections.items() for k in keys
                     if k not in by_section.get(s, set()))
    missing += sorted("%s: %s" % (t, k) for t, keys in types.items() for k in keys if k not in credential_keys)
    assert not missing, "read by the loader, not shown in proxy.conf.example: %s" % missing


def test_every_key_the_example_shows_is_read():
    sections, types = loader_keys()
    shown = shown_keys(open(EXAMPLE, encoding="utf-8").read())
    assert len(shown) > 80, "the example's keys were not found"
    wrong = sorted({"[%s]%s %s" % (s, " (type %s)" % t if t else "", k) for s, t, k in shown
                    if not accepted(s, t, k, sections, types)})
    assert not wrong, "shown in proxy.conf.example, not read by the loader: %s" % wrong


def test_every_key_the_documentation_examples_show_is_read():
    sections, types = loader_keys()
    wrong, seen = [], 0
    for path, block in toml_blocks():
        for s, t, k in shown_keys(block):
            seen += 1
            if not accepted(s, t, k, sections, types):
                wrong.append("%s: [%s]%s %s" % (path, s, " (type %s)" % t if t else "", k))
    assert seen > 100, "the documentation's TOML examples were not found"
    assert not wrong, "keys in the documentation's TOML examples that the loader does not read: %s" % wrong


def test_the_example_is_toml():
    tomllib.loads(open(EXAMPLE, encoding="utf-8").read())


# ---------------------------------------------------------------------------
# Tests: links, anchors, pages
# ---------------------------------------------------------------------------

def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` removed, spaces as `-`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path):
    found, counts, fence = set(), {}, False
    for line in open(path, encoding="utf-8"):
        if line.lstrip().startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"^#{1,6} (.*)", line)
        if m:
            s = slug(m.group(1))
            n = counts.get(s, 0)
            counts[s] = n + 1
            found.add(s if n == 0 else "%s-%d" % (s, n))
    return found


def markdown_files():
    files = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CONTRIBUTING.md"),
             os.path.join(ROOT, "deploy", "README.md")]
    files += [os.path.join(ROOT, "docs", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs"))) if f.endswith(".md")]
    return files


def links(path):
    """Relative link targets outside code blocks and code spans."""
    text = re.sub(r"```.*?```", "", open(path, encoding="utf-8").read(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_every_relative_link_and_anchor_resolves():
    broken, checked = [], 0
    for path in markdown_files():
        for target in links(path):
            if re.match(r"^[a-z]+:", target):
                continue
            checked += 1
            file_part, _, fragment = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            rel = os.path.relpath(path, ROOT)
            if not os.path.exists(dest):
                broken.append("%s: %s (no such file)" % (rel, target))
            elif fragment and dest.endswith(".md") and fragment not in anchors(dest):
                broken.append("%s: %s (no such heading)" % (rel, target))
    assert checked > 100
    assert not broken, "\n".join(broken)


def test_readme_is_a_front_page_that_links_every_page():
    readme = os.path.join(ROOT, "README.md")
    assert sum(1 for _ in open(readme, encoding="utf-8")) <= 300
    linked = {os.path.normpath(os.path.join(ROOT, t.partition("#")[0])) for t in links(readme)}
    pages = [p for p in markdown_files() if os.path.dirname(p) == os.path.join(ROOT, "docs")]
    pages.append(os.path.join(ROOT, "CONTRIBUTING.md"))
    unlinked = [os.path.relpath(p, ROOT) for p in pages if p not in linked]
    assert not unlinked, "pages the README does not link: %s" % unlinked


def test_long_pages_have_a_table_of_contents():
    """A page over 150 lines lists its sections near the top (a `Contents` heading followed by links)."""
    missing = []
    for path in markdown_files():
        lines = open(path, encoding="utf-8").read().split("\n")
        if len(lines) <= 150 or os.path.basename(path) == "README.md":
            continue
        head = "\n".join(lines[:60])
        if not re.search(r"^## Contents\n\n(- \[.*\]\(#.*\)\n)+", head, re.M):
            missing.append(os.path.relpath(path, ROOT))
    assert not missing, "long pages without a table of contents: %s" % missing


def test_the_readme_keeps_the_two_setup_commands():
    """The README contract: one command builds and runs the proxy, one runs every test (`.ci/run` runs it)."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert "\n./scripts/run-proxy.sh\n" in text
    assert "\n./scripts/test.sh\n" in text
    assert "scripts/test.sh" in open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read()
