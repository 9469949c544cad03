#!/usr/bin/env python3
"""OpenResty's own shared-dictionary tests, run against ngx.shared and against vmpool.shared.

Runs the blocks of lua-nginx-module's t/043-shdict.t, 080-hup-shdict.t, 126-shdict-frag.t,
144-shdict-incr-init.t, 145-shdict-list.t and lua-resty-core's t/shdict.t (Test::Nginx files; Test::Nginx
itself is not in Debian) in Debian's nginx, each block in a fresh nginx with the block's
http_config and config, twice: as written (ngx.shared), and with ngx.shared.NAME standing for
vmpool.shared(NAME, { capacity = SIZE }) (SIZE from the block's lua_shared_dict line; the
replacement is made in init_by_lua, so every phase of every worker sees it). A block passes when its
response status, body (response_body, response_body_like, each pipelined request's) and error log
(error_log, no_error_log, grep_error_log) are what the block expects. stap sections are ignored.
Prints each block that passes on nginx and fails on vmpool, and the counts.

Several blocks need the echo module: apt-get install libnginx-mod-http-echo (without it they fail on
both sides).

With --plain=LUA (lua5.1, lua5.4, luajit: the rock built for it, scripts/rock.sh LUA), the blocks
that pass on nginx and whose request is served by one content handler (other locations only
/sleep/N ones) run again in plain Lua instead of nginx, through bench/ngx/shdict_plain.lua, which
stands in for the few ngx functions they use; checks of LuaJIT's traces in the error log
([TRACE ...], NYI, stitch) do not apply there and are left out.

Usage (the rock built for LuaJIT: scripts/rock.sh luajit):
  python3 bench/ngx/shdict_compat.py LUA_NGINX_MODULE_CHECKOUT LUA_RESTY_CORE_CHECKOUT [--only=FILE[:N]] [--plain=LUA] [-v]
A checkout can be a directory with t/*.t in it (the files are read from there, not copied here).
"""
import http.client
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CPATH = os.path.join(ROOT, "lua_modules/luajit/lib/lua/5.1/?.so")
FILES = [("lua-nginx-module", f) for f in
         ("043-shdict.t", "080-hup-shdict.t", "126-shdict-frag.t", "144-shdict-incr-init.t",
          "145-shdict-list.t")] + [("lua-resty-core", "shdict.t")]
NGINX_VERSION = (1, 22, 1)
# several blocks use the echo module (echo, echo_sleep, echo_location): Debian's
# libnginx-mod-http-echo; without it they fail on both sides
ECHO_SO = "/usr/lib/nginx/modules/ngx_http_echo_module.so"
ECHO = "load_module %s;" % ECHO_SO if os.path.exists(ECHO_SO) else ""


# ---- Test::Base blocks -------------------------------------------------------------------------

def parse_blocks(text):
    data = text.split("\n__DATA__\n", 1)[1]
    data = data.split("\n__END__\n", 1)[0]
    blocks = []
    for chunk in re.split(r"(?m)^(?==== TEST)", data):
        if not chunk.startswith("=== TEST"):
            continue
        head, _, rest = chunk.partition("\n")
        b = {"title": head[4:].strip(), "sections": {}}
        for m in re.finditer(r"(?ms)^--- (\w+)([^\n]*)\n(.*?)(?=^--- \w|\Z)", rest):
            name, mods, body = m.group(1), m.group(2).strip(), m.group(3)
            if mods.startswith(":"):  # --- skip_nginx: 5: < 1.11.7
                body, mods = mods[1:].strip(), ""
            body = body.replace("\r\n", "\n")
            body = re.sub(r"\A(\s*\n)+", "", body)        # trim: leading blank lines
            body = re.sub(r"(\n\s*)+\Z", "\n", body)      # trailing ones, keeping one newline
            if body.strip() == "":
                body = ""
            flags = mods.split()
            if "chomp" in flags or "chop" in flags:
                body = body[:-1] if body.endswith("\n") else body
            b["sections"][name] = (body, flags)
        blocks.append(b)
    return blocks


def preamble_http_config(text):
    """The lua_shared_dict lines a file's block preprocessor adds to every block."""
    head = text.split("\n__DATA__\n", 1)[0]
    return "\n".join(re.findall(r"(?m)^\s*lua_shared_dict[^\n]*;", head))


# ---- a few Perl expressions: strings, qr//, x, ., arrays ----------------------------------------

PERL_ESC = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "$": "$", "@": "@", "0": "\0"}


class Regex(str):
    pass


def perl_eval(src):
    src = src.strip()
    pos = 0
    n = len(src)
    env = {}

    def skip():
        nonlocal pos
        while pos < n and (src[pos].isspace() or src[pos] == "#"):
            if src[pos] == "#":
                while pos < n and src[pos] != "\n":
                    pos += 1
            else:
                pos += 1

    def term():
        nonlocal pos
        skip()
        c = src[pos]
        if c == "(":
            pos += 1
            v = expr()
            skip()
            pos += 1  # )
            return v
        if c == "$":
            m = re.compile(r"\$(\w+)").match(src, pos)
            pos = m.end()
            return env[m.group(1)]
        if c == "[":
            pos += 1
            items = []
            while True:
                skip()
                if src[pos] == "]":
                    pos += 1
                    return items
                items.append(expr())
                skip()
                if src[pos] == ",":
                    pos += 1
        if c == '"':
            pos += 1
            out = []
            while src[pos] != '"':
                if src[pos] == "\\":
                    pos += 1
                    e = src[pos]
                    if e == "x" and src[pos + 1] == "{":
                        end = src.index("}", pos)
                        out.append(chr(int(src[pos + 2:end], 16)))
                        pos = end
                    elif e == "x":
                        out.append(chr(int(src[pos + 1:pos + 3], 16)))
                        pos += 2
                    else:
                        out.append(PERL_ESC.get(e, e))
                else:
                    out.append(src[pos])
                pos += 1
            pos += 1
            return "".join(out)
        if c == "'":
            pos += 1
            out = []
            while src[pos] != "'":
                if src[pos] == "\\" and src[pos + 1] in "\\'":
                    pos += 1
                out.append(src[pos])
                pos += 1
            pos += 1
            return "".join(out)
        if src.startswith("q{", pos) or src.startswith("q(", pos) or src.startswith("q[", pos):
            close = {"{": "}", "(": ")", "[": "]"}[src[pos + 1]]
            end = src.index(close, pos + 2)
            v = src[pos + 2:end]
            pos = end + 1
            return v
        if src.startswith("qq{", pos):
            end = src.index("}", pos + 3)
            v = src[pos + 3:end]
            pos = end + 1
            return re.sub(r"\\(.)", lambda m: PERL_ESC.get(m.group(1), m.group(1)), v)
        if src.startswith("qr", pos):
            pos += 2
            open_ = src[pos]
            close = {"(": ")", "{": "}", "[": "]", "<": ">"}.get(open_, open_)
            pos += 1
            out = []
            while src[pos] != close:
                if src[pos] == "\\" and src[pos + 1] == close:
                    pos += 1
                out.append(src[pos])
                pos += 1
            pos += 1
            flags = ""
            while pos < n and src[pos].isalpha():
                flags += src[pos]
                pos += 1
            text = re.sub(r"\$(\w+)", lambda m: env[m.group(1)], "".join(out))
            r = Regex(text)
            r.flags = flags
            return r
        m = re.compile(r"\d+").match(src, pos)
        if m:
            pos = m.end()
            return int(m.group())
        raise ValueError("perl: cannot read %r" % src[pos:pos + 30])

    def expr():
        nonlocal pos
        v = term()
        while True:
            skip()
            if pos < n and src[pos] == "x" and not src[pos + 1:pos + 2].isalnum():
                pos += 1
                k = term()
                v = [x for _ in range(k) for x in v] if isinstance(v, list) else v * k
            elif pos < n and src[pos] == ".":
                pos += 1
                v = v + term()
            else:
                return v

    while True:
        skip()
        m = re.compile(r"my\s+\$(\w+)\s*=").match(src, pos)
        if not m:
            break
        pos = m.end()
        env[m.group(1)] = expr()
        skip()
        if src[pos] == ";":
            pos += 1
    v = expr()
    skip()
    if pos < n and src[pos] == ";":
        pos += 1
        skip()
    if pos != n:
        raise ValueError("perl: left over %r" % src[pos:pos + 30])
    return v


def perl_regex(pat, flags=""):
    # Perl and Python regexes agree on what these tests use, but for \z and possessive bits
    pat = pat.replace(r"\z", r"\Z")
    f = re.S if "s" in flags else 0
    if "m" in flags:
        f |= re.M
    if "i" in flags:
        f |= re.I
    if "x" in flags:
        f |= re.X
    return re.compile(pat, f)


def value_of(section):
    body, flags = section
    if "eval" in flags:
        return perl_eval(body)
    return body


def lines_of(section):
    """error_log / no_error_log: a list of strings or regexes."""
    v = value_of(section)
    if isinstance(v, list):
        return v
    if isinstance(v, Regex):
        return [v]
    return [line for line in v.split("\n") if line.strip() != ""]


# ---- nginx ---------------------------------------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


SHIM = r"""
    do
      local sizes = { %s }
      local vmpool = require "vmpool"
      ngx.shared = setmetatable({}, { __index = function(t, name)
        if not sizes[name] then return nil end
        local d = vmpool.shared(name, { capacity = sizes[name] })
        rawset(t, name, d)
        return d
      end })
    end
"""

INIT_TESTCORE = r"""
    local v = require "jit.v"
    v.on("%s")
    require "resty.core"
    jit.opt.start("hotloop=10")
"""


def lua_quote(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def build_conf(prefix, port, http_config, config, use_vmpool, testcore, log_level):
    zones = re.findall(r"lua_shared_dict\s+(\S+)\s+(\S+?)\s*;", http_config)
    init = ""
    if testcore:
        init += INIT_TESTCORE % os.path.join(prefix, "logs/error.log")
    if use_vmpool:
        init += SHIM % ", ".join("[%s] = %s" % (lua_quote(n), lua_quote(s)) for n, s in zones)
    m = re.search(r"init_by_lua_block\s*\{", http_config)
    if m:
        http_config = http_config[:m.end()] + init + http_config[m.end():]
    elif init:
        http_config += "\n    init_by_lua_block {" + init + "}\n"
    subst = {"TEST_NGINX_SERVER_PORT": str(port), "TEST_NGINX_HTML_DIR": os.path.join(prefix, "html"),
             "TEST_NGINX_HOTLOOP": "10", "TEST_NGINX_MEMCACHED_PORT": "11211"}
    for k, v in subst.items():
        http_config = http_config.replace("$" + k, v)
        config = config.replace("$" + k, v)
    return """
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
%s
worker_processes 1;
daemon on;
master_process on;
error_log logs/error.log %s;
pid logs/nginx.pid;
events { worker_connections 256; }
http {
    access_log off;
    default_type text/plain;
    lua_package_cpath "%s;;";
    lua_package_path "/usr/share/lua/5.1/?.lua;;";
    %s
    server {
        listen 127.0.0.1:%d;
        server_name localhost;
        client_max_body_size 30M;
        %s
    }
}
""" % (ECHO, log_level, CPATH, http_config, port, config)


class Nginx:
    def __init__(self):
        self.prefix = tempfile.mkdtemp(prefix="shdict-compat-")
        for d in ("logs", "conf", "html"):
            os.makedirs(os.path.join(self.prefix, d), exist_ok=True)
        self.port = free_port()
        self.running = False

    def log(self):
        try:
            with open(os.path.join(self.prefix, "logs/error.log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def write_conf(self, text):
        with open(os.path.join(self.prefix, "conf/nginx.conf"), "w") as f:
            f.write(text)

    def start(self):
        r = subprocess.run(["nginx", "-p", self.prefix, "-c", "conf/nginx.conf"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return r.stderr
        self.running = True
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return None
            except OSError:
                time.sleep(0.02)
        return "nginx did not listen"

    def reload(self):
        """HUP, as Test::Nginx's TEST_NGINX_USE_HUP: the zones stay, the workers are new."""
        before = self.log().count("start worker process")
        subprocess.run(["nginx", "-p", self.prefix, "-c", "conf/nginx.conf", "-s", "reload"],
                       capture_output=True)
        deadline = time.time() + 10
        while time.time() < deadline and self.log().count("start worker process") <= before:
            time.sleep(0.02)
        time.sleep(0.2)  # the old worker stops accepting once it has the signal

    def stop(self):
        if self.running:
            subprocess.run(["nginx", "-p", self.prefix, "-c", "conf/nginx.conf", "-s", "stop"],
                           capture_output=True)
            pidfile = os.path.join(self.prefix, "logs/nginx.pid")
            deadline = time.time() + 10
            while os.path.exists(pidfile) and time.time() < deadline:
                time.sleep(0.02)
            self.running = False

    def remove(self):
        self.stop()
        shutil.rmtree(self.prefix, ignore_errors=True)

    def request(self, raw, timeout):
        method, _, rest = raw.partition(" ")
        path, _, body = rest.partition("\n")
        path = path.split()[0]
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body or None)
            resp = conn.getresponse()
            return resp.status, resp.read().decode("latin-1"), dict(resp.getheaders())
        except Exception as e:  # a worker that died, a timeout
            return None, "", {"error": str(e)}
        finally:
            conn.close()


# ---- one block ---------------------------------------------------------------------------------

def skipped(b):
    s = b["sections"].get("skip_nginx")
    if not s:
        return False
    m = re.match(r"\s*\d+\s*:\s*([<>=!]+)\s*([\d.]+)", s[0])
    if not m:
        return False
    want = tuple(int(x) for x in m.group(2).split("."))
    op = m.group(1)
    v = NGINX_VERSION
    return {"<": v < want, "<=": v <= want, ">": v > want, ">=": v >= want}.get(op, False)


TRACE_CHECK = re.compile(r"TRACE|NYI|stitch")


def check(b, nginx, results, log=None, plain=False):
    """What differs from the block's expectations (empty: it passes)."""
    sec = b["sections"]
    problems = []
    want_status = int(value_of(sec["error_code"]).strip()) if "error_code" in sec else 200
    for i, (status, body, headers) in enumerate(results):
        if "must_die" in sec:
            continue
        if status != want_status:
            problems.append("status %s, want %s (%s)" % (status, want_status, headers.get("error", "")))
        if "response_body" in sec:
            want = value_of(sec["response_body"])
            if isinstance(want, list):
                want = want[i]
            if isinstance(want, Regex):
                if not perl_regex(want, want.flags).search(body):
                    problems.append("body %r, want like %r" % (body[:300], want[:300]))
            elif body != want:
                problems.append("body %r, want %r" % (body[:300], want[:300]))
        for name in ("response_body_like",):
            if name in sec:
                pat = value_of(sec[name])
                if isinstance(pat, list):
                    pat = pat[i]
                if not perl_regex(pat, getattr(pat, "flags", "") + "s").search(body):
                    problems.append("body %r, want like %r" % (body[:300], pat[:200]))
        if "response_headers" in sec:
            for line in value_of(sec["response_headers"]).splitlines():
                k, _, v = line.partition(":")
                if k.strip() and headers.get(k.strip(), "") != v.strip():
                    problems.append("header %s: %r" % (k, headers.get(k.strip())))
    if log is None:
        log = nginx.log()
    if "error_log" in sec:
        for item in lines_of(sec["error_log"]):
            if plain and TRACE_CHECK.search(str(item)):
                continue
            if isinstance(item, Regex):
                if not perl_regex(item, item.flags).search(log):
                    problems.append("error_log lacks %r" % str(item))
            elif item not in log:
                problems.append("error_log lacks %r" % item)
    if "no_error_log" in sec:
        for item in lines_of(sec["no_error_log"]):
            if plain and TRACE_CHECK.search(str(item)):
                continue
            if isinstance(item, Regex):
                if perl_regex(item, item.flags).search(log):
                    problems.append("error_log has %r" % str(item))
            elif item in log:
                line = next((l for l in log.splitlines() if item in l), "")
                problems.append("error_log has %r: %s" % (item, line[:300]))
    if "grep_error_log" in sec:
        pat = value_of(sec["grep_error_log"])
        found = (perl_regex(pat, pat.flags).findall(log) if isinstance(pat, Regex)
                 else [pat for line in log.splitlines() for _ in range(line.count(pat))])
        want = value_of(sec.get("grep_error_log_out", ("", [])))
        got = "".join(f + "\n" for f in found)
        if got != want:
            problems.append("grep_error_log %r, want %r" % (got[:200], want[:200]))
    return problems


def run_block(b, file_http_config, testcore, use_vmpool, nginx=None):
    sec = b["sections"]
    own = nginx is None
    nginx = nginx or Nginx()
    http_config = value_of(sec["http_config"]) if "http_config" in sec else ""
    if testcore and "http_config" not in sec:
        http_config = "init_by_lua_block {\n}\n"
    http_config = file_http_config + "\n" + http_config
    config = value_of(sec.get("config", ("", [])))
    level = value_of(sec["log_level"]).strip() if "log_level" in sec else "debug"
    nginx.write_conf(build_conf(nginx.prefix, nginx.port, http_config, config, use_vmpool,
                                testcore, level))
    try:
        if nginx.running:
            nginx.reload()
        else:
            err = nginx.start()
            if err:
                return ["nginx did not start: " + err.strip()[-300:]] if "must_die" not in sec else []
        timeout = float(value_of(sec["timeout"]).strip().rstrip("s")) if "timeout" in sec else 10
        if "pipelined_requests" in sec:
            reqs = value_of(sec["pipelined_requests"])
        elif "request" in sec:
            r = value_of(sec["request"])
            reqs = r if isinstance(r, list) else [r]
        else:
            reqs = ["GET /t"]
        results = [nginx.request(r.strip("\n"), timeout) for r in reqs]
        return check(b, nginx, results)
    finally:
        if own:
            nginx.remove()


def nginx_unquote(body):
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            e = body[i + 1]
            out.append({"n": "\n", "t": "\t", "r": "\r"}.get(e, e if e in "\"'\\" else "\\" + e))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def plain_handler(config, path):
    """The Lua code of the one content handler serving `path`, or None."""
    if re.search(r"\b(set|rewrite|access|header_filter|body_filter|log|balancer)_by_lua", config):
        return None
    if re.search(r"^\s*echo\b(?!_sleep)", config, re.M):
        return None
    locations = re.findall(r"location\s+(=\s*)?(\S+)\s*\{", config)
    served = [loc for eq, loc in locations if "sleep" not in loc]
    if len(served) != 1 or served[0] != path:
        return None
    m = re.search(r"content_by_lua_block\s*\{", config)
    if m:
        depth, i = 1, m.end()
        while depth and i < len(config):
            depth += {"{": 1, "}": -1}.get(config[i], 0)
            i += 1
        return config[m.end():i - 1]
    m = re.search(r"content_by_lua\s+'((?:[^'\\]|\\.)*)'", config, re.S)
    if m:
        return nginx_unquote(m.group(1))
    return None


def run_plain(b, file_http_config, lua):
    """The block's handler in plain Lua; what differs from its expectations, or None if it cannot
    run there."""
    sec = b["sections"]
    if "must_die" in sec:
        return None
    if "pipelined_requests" in sec:
        reqs = value_of(sec["pipelined_requests"])
    elif "request" in sec:
        r = value_of(sec["request"])
        reqs = r if isinstance(r, list) else [r]
    else:
        return None
    paths = set()
    for req in reqs:
        method, _, rest = req.strip().partition(" ")
        if method != "GET":
            return None
        paths.add(rest.split()[0])
    if len(paths) != 1:
        return None
    path = paths.pop()
    config = value_of(sec.get("config", ("", [])))
    code = plain_handler(config, path)
    if code is None:
        return None
    http_config = file_http_config + "\n" + (value_of(sec["http_config"]) if "http_config" in sec else "")
    zones = re.findall(r"lua_shared_dict\s+(\S+)\s+(\S+?)\s*;", http_config)
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(code)
        name = f.name
    env = dict(os.environ, LUA=lua)
    cmd = ". scripts/luaenv.sh && %s bench/ngx/shdict_plain.lua %s %d %s" % (
        lua, name, len(reqs), " ".join("%s=%s" % z for z in zones))
    try:
        r = subprocess.run(["sh", "-c", cmd], cwd=ROOT, env=env, capture_output=True, timeout=60)
    finally:
        os.unlink(name)
    results = []
    for m in re.finditer(r"(.*?)\0status (\d+)\n", r.stdout.decode("latin-1"), re.S):
        results.append((int(m.group(2)), m.group(1), {}))
    if len(results) != len(reqs):
        return ["the handler did not answer every request: %s" % r.stderr.decode("latin-1")[-300:]]
    return check(b, None, results, log=r.stderr.decode("latin-1"), plain=True)


def main(argv):
    args = [a for a in argv if not a.startswith("-")]
    only = next((a.split("=", 1)[1] for a in argv if a.startswith("--only=")), None)
    verbose = "-v" in argv
    plain = next((a.split("=", 1)[1] for a in argv if a.startswith("--plain=")), None)
    if len(args) != 2:
        print(__doc__)
        return 2
    checkouts = {"lua-nginx-module": args[0], "lua-resty-core": args[1]}
    totals = {"blocks": 0, "skipped": 0, "ngx": 0, "vmpool": 0, "both": 0, "not_plain": 0}
    for repo, name in FILES:
        if only and not only.split(":")[0] == name:
            continue
        with open(os.path.join(checkouts[repo], "t", name)) as f:
            text = f.read()
        blocks = parse_blocks(text)
        file_http = preamble_http_config(text)
        testcore = "t::TestCore" in text
        hup = "TEST_NGINX_USE_HUP" in text
        shared = {True: None, False: None}
        if hup:
            shared = {True: Nginx(), False: Nginx()}
        passed = {True: 0, False: 0}
        for i, b in enumerate(blocks, 1):
            if only and ":" in only and str(i) != only.split(":")[1]:
                continue
            totals["blocks"] += 1
            if skipped(b):
                totals["skipped"] += 1
                continue
            res = {}
            for use_vmpool in (False, True):
                if use_vmpool and plain:
                    if res[False]:
                        res[True] = ["fails on nginx"]
                    else:
                        res[True] = run_plain(b, file_http, plain)
                        if res[True] is None:
                            totals["not_plain"] += 1
                            res[True] = ["not a plain content handler"]
                    continue
                res[use_vmpool] = run_block(b, file_http, testcore, use_vmpool, shared[use_vmpool])
            for use_vmpool in (False, True):
                if not res[use_vmpool]:
                    passed[use_vmpool] += 1
            totals["ngx"] += not res[False]
            totals["vmpool"] += not res[True]
            totals["both"] += not res[False] and not res[True]
            if not res[False] and res[True]:
                print("%s %s: passes on nginx, fails on vmpool: %s" % (name, b["title"], "; ".join(res[True])[:600]))
            elif verbose and res[False]:
                print("%s %s: fails on nginx: %s" % (name, b["title"], "; ".join(res[False])[:400]))
            elif res[False] and not res[True]:
                print("%s %s: fails on nginx, passes on vmpool" % (name, b["title"]))
        for n in shared.values():
            if n:
                n.remove()
        print("%s: %d blocks, nginx %d, vmpool %d" % (name, len(blocks), passed[False], passed[True]))
    print("total: %(blocks)d blocks (%(skipped)d skipped for nginx 1.22), pass on nginx %(ngx)d, "
          "on vmpool %(vmpool)d, on both %(both)d" % totals
          + ("; in plain %s, %d of those on nginx are not a plain content handler"
             % (plain, totals["not_plain"]) if plain else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
