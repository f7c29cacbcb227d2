"""Observability: a real Prometheus server scraping two daemons that run a job (and the Grafana
dashboard's queries against it), promtool on the exposition, bad input on the metrics port, the
Chrome-trace timeline of a two-node job with fusion and a membership change (ringctl timeline
and RINGD_TIMELINE), and ringctl metrics / watch."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import (Daemon, TwoNodes, _binary, _die_with_parent, _env_for_servers, free_port,
                      status, tail, wait_for)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DASHBOARD = os.path.join(ROOT, "deploy", "k8s", "monitoring", "ringd-dashboard.json")
MIB = 1 << 20


def need(cmd):
    path = shutil.which(cmd)
    if path is None:
        pytest.fail(f"{cmd} not found: install Debian's prometheus (scripts/deps.sh does)",
                    pytrace=False)
    return path


def scrape(address):
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


def sample(text, name, **labels):
    """The value of the series name{labels...} in an exposition (labels: a subset to match)."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        m = re.match(r'([a-z_]+)(\{(.*)\})? (\S+)$', line)
        if m is None or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        if all(got.get(k) == str(v) for k, v in labels.items()):
            return float(m.group(4))
    return None


class Prometheus:
    """A prometheus server scraping targets every second (honor_labels: ringd's job label is the
    training job's), in a temporary directory, on a free port."""

    def __init__(self, targets):
        self.dir = tempfile.mkdtemp(prefix="ringd-prom.")
        cfg = os.path.join(self.dir, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: ringd\n    honor_labels: true\n"
                    "    static_configs:\n      - targets: [%s]\n"
                    % ", ".join(f'"{t}"' for t in targets))
        self.address = f"127.0.0.1:{free_port()}"
        self.log = os.path.join(self.dir, "prometheus.log")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [need("prometheus"), f"--config.file={cfg}",
                 f"--storage.tsdb.path={os.path.join(self.dir, 'data')}",
                 f"--web.listen-address={self.address}"],
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)

        def ready():
            assert self.proc.poll() is None, tail(self.log)
            try:
                with urllib.request.urlopen(f"http://{self.address}/-/ready", timeout=2) as r:
                    return r.status == 200
            except (urllib.error.URLError, ConnectionError):
                return False
        if not wait_for(ready, 60, every=0.2):
            self.close()
            raise RuntimeError(f"prometheus did not get ready: {tail(self.log)}")

    def query(self, q):
        url = f"http://{self.address}/api/v1/query?" + urllib.parse.urlencode({"query": q})
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            body = json.load(e)
        assert body["status"] == "success", f"{q}: {body}"
        return body["data"]["result"]

    def value(self, q):
        """The values of q's series, by instance."""
        return {s["metric"].get("instance", ""): float(s["value"][1]) for s in self.query(q)}

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def bench(d, job, *args, world=2):
    return subprocess.Popen([_binary("RINGD_BENCH_BIN"), "--socket", d.sock, "--procs", "1",
                             "--world", str(world), "--job", job, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def finish(procs, daemons):
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, out + err + "\n".join(tail(d.log) for d in daemons)
    return [o for o, _ in outs]


def kill(procs):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.communicate(timeout=30)


def dashboard_queries():
    """Every target expression of the Grafana dashboard, with Grafana's variables as a live
    server would have them."""
    with open(DASHBOARD) as f:
        dash = json.load(f)
    exprs = []

    def walk(panels):
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                if t.get("expr"):
                    exprs.append((p.get("title", "?"), t["expr"]))
    walk(dash["panels"])
    subst = {"$__rate_interval": "1m", "$__range": "5m", "$job": ".*"}
    out = []
    for title, e in exprs:
        for k, v in subst.items():
            e = e.replace(k, v)
        out.append((title, e))
    return out


def test_prometheus_scrapes_two_daemons_and_the_dashboard_queries_get_data(tmp_path):
    flags = ["--metrics-listen", "127.0.0.1:0", "--fusion-cycle-us", "2000"]
    nodes = TwoNodes(tmp_path, [flags, flags])
    prom = None
    try:
        addrs = [status(d)["metrics"] for d in nodes.daemons]
        assert all(re.match(r"127\.0\.0\.1:\d+$", a) for a in addrs), addrs
        prom = Prometheus(addrs)
        # a long job: its ring's links and fusion show while it runs
        nodes.start("live", 1_000_000)
        assert wait_for(lambda: len(prom.query('ringd_link_bytes_total{job="live"} > 0')) == 4,
                        60, every=0.5), prom.query('ringd_link_bytes_total')
        assert wait_for(lambda: prom.value(
            'sum by (instance) (rate(ringd_ring_pass_ops_sum{job="live"}[30s])) / '
            'sum by (instance) (rate(ringd_ring_pass_ops_count{job="live"}[30s])) > 1'), 60,
            every=0.5), "no fusion seen: " + scrape(addrs[0])
        conns = prom.value('ringd_link_connections{job="live"}')
        assert len(conns) == 2 and all(v == 2 for v in conns.values()), conns
        for title, q in dashboard_queries():  # the live job gives every panel data
            if "gpu" in q or "device" in q:
                prom.query(q)  # no GPU here: valid, and empty
                continue
            assert wait_for(lambda: len(prom.query(q)) > 0, 30, every=0.5), \
                f"dashboard panel '{title}': no data for {q}"
        nodes.kill_ranks()
        # a bounded job: the bytes each node wrote are what the bench moved
        iters, warm = 30, 3
        procs = [bench(d, "sized", "-b", "1M", "-e", "1M", "-n", str(iters), "-w", str(warm))
                 for d in nodes.daemons]
        finish(procs, nodes.daemons)
        # the sweep's ops, one checked op more; then the bench's own two: its times (f64 each)
        # and its #wrong count (one i64)
        sweep = iters + warm + 1
        ops, moved = sweep + 2, sweep * MIB + iters * 8 + 8
        for a in addrs:
            text = scrape(a)
            assert sample(text, "ringd_ops_total", job="sized", kind="allreduce",
                          result="ok") == ops, text
            assert sample(text, "ringd_bytes_total", job="sized", kind="allreduce") == moved
            assert sample(text, "ringd_op_duration_seconds_count", job="sized",
                          kind="allreduce", size="64KiB-1MiB") == sweep
            assert sample(text, "ringd_membership_changes_total", job="sized", cause="start") == 1
            # the other node heard of every op (announcements; the coordinator's orders)
            sent = sample(text, "ringd_control_messages_sent_total")
            assert sent >= ops and sample(text, "ringd_control_bytes_sent_total") > sent, text
            assert sample(text, "ringd_keepalives_sent_total") is not None
            chk = subprocess.run([need("promtool"), "check", "metrics"], input=text,
                                 capture_output=True, text=True, timeout=30)
            assert chk.returncode == 0 and chk.stdout.strip() == "" and \
                chk.stderr.strip() == "", chk.stdout + chk.stderr
        # the same through Prometheus, once it has scraped the job's end
        want = {a: float(moved) for a in addrs}
        assert wait_for(lambda: prom.value('ringd_bytes_total{job="sized",kind="allreduce"}')
                        == want, 30, every=0.5), prom.value('ringd_bytes_total{job="sized"}')
        rtt = prom.value("ringd_redis_rtt_seconds")
        assert len(rtt) == 2 and all(v > 0 for v in rtt.values()), rtt
        assert prom.value("ringd_redis_up") == {a: 1.0 for a in addrs}
        neg = prom.value('ringd_negotiation_wait_seconds_count{job="sized"}')
        assert neg == {a: float(ops) for a in addrs}, neg
    finally:
        if prom is not None:
            prom.close()
        nodes.close()
    for d in nodes.daemons:
        assert d.proc.returncode == 0, tail(d.log)


def test_ringctl_metrics_prints_what_http_serves():
    d = Daemon(["--metrics-listen", "127.0.0.1:0"])
    try:
        p = bench(d, "one", "-b", "4", "-e", "4K", "-n", "5", "-w", "1", world=1)
        finish([p], [d])
        r = subprocess.run([_binary("RINGCTL_BIN"), "--socket", d.sock, "metrics"],
                           capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, r.stderr
        http = scrape(status(d)["metrics"])
        families = lambda t: re.findall(r"^# TYPE (\S+)", t, re.M)  # noqa: E731
        assert families(r.stdout) == families(http) and len(families(http)) > 15
        assert sample(r.stdout, "ringd_ops_total", job="one", result="ok") == \
            sample(http, "ringd_ops_total", job="one", result="ok") == 6 * (5 + 1 + 1 + 2)
        assert sample(r.stdout, "ringd_redis_up") is None  # no --redis: no such series
        assert sample(r.stdout, "ringd_control_messages_sent_total") == 0  # one node: no peers
        assert sample(r.stdout, "ringd_job_ranks", job="one") is None  # the job has ended
    finally:
        assert d.stop() == 0, tail(d.log)
        d.remove()


def test_a_daemon_without_metrics_listen_serves_none_and_a_bad_address_is_refused(tmp_path):
    d = Daemon()
    try:
        assert status(d)["metrics"] == ""
    finally:
        d.stop()
        d.remove()
    sock = str(tmp_path / "s.sock")
    for bad, why in [("nowhere", "not HOST:PORT"), ("127.0.0.1:99999", "not HOST:PORT"),
                     ("192.0.2.1:9", "Cannot assign requested address")]:
        r = subprocess.run([_binary("RINGD_BIN"), "--socket", sock, "--metrics-listen", bad],
                           capture_output=True, text=True, timeout=20, env=_env_for_servers())
        assert r.returncode != 0 and why in r.stdout + r.stderr, r.stdout + r.stderr


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_bad_input_on_the_metrics_port_leaves_collectives_running():
    d = Daemon(["--metrics-listen", "127.0.0.1:0"])
    held = []
    try:
        host, port = status(d)["metrics"].rsplit(":", 1)
        port = int(port)
        fds0 = open_fds(d.proc.pid)
        job = bench(d, "busy", "-b", "4", "-e", "64K", "-f", "4", "-n", "2000", "-w", "10",
                    world=1)
        # many connections, half of them sending a request line and stopping there (slow)
        for i in range(300):
            s = socket.create_connection((host, port), timeout=5)
            if i % 2:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            held.append(s)

        def exchange(data):
            """What the server answers data with, up to its closing the connection."""
            got = b""
            with socket.create_connection((host, port), timeout=10) as s:
                try:
                    s.sendall(data)
                    s.shutdown(socket.SHUT_WR)
                except OSError:  # it may close before it has read everything
                    pass
                try:
                    while True:
                        b = s.recv(65536)
                        if not b:
                            return got
                        got += b
                except ConnectionResetError:
                    return got
        status_line = lambda data: exchange(data).split(b"\r\n")[0]  # noqa: E731
        assert status_line(bytes(range(256)) * 64) in (b"", b"HTTP/1.1 400 Bad Request")
        assert status_line(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 100000 + b"\r\n\r\n") in \
            (b"", b"HTTP/1.1 400 Bad Request", b"HTTP/1.1 413 Payload Too Large")
        assert status_line(b"POST /metrics HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello") in \
            (b"HTTP/1.1 405 Method Not Allowed", b"HTTP/1.1 413 Request Entity Too Large")
        assert status_line(b"DELETE /metrics HTTP/1.0\r\n\r\n") in \
            (b"HTTP/1.1 405 Method Not Allowed", b"HTTP/1.1 501 Not Implemented")
        assert exchange(b"GET /secret HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 404")
        assert exchange(b"GET /metrics HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 200")
        # collectives go on through it all, every result right (ringd-bench exits 0)
        finish([job], [d])
        assert "ringd_ops_total" in scrape(f"{host}:{port}")
        # a client that stops mid-request is dropped by the server's timeout
        with socket.create_connection((host, port), timeout=30) as slow:
            slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            t0 = time.monotonic()
            assert slow.recv(100) == b"" and time.monotonic() - t0 < 25
        for s in held:
            s.close()
        held.clear()
        # every one of those connections is gone again (the idle ones by the server's timeout)
        assert wait_for(lambda: open_fds(d.proc.pid) <= fds0, 30, every=0.5), \
            (open_fds(d.proc.pid), fds0)
    finally:
        for s in held:
            s.close()
        assert d.stop() == 0, tail(d.log)
        d.remove()


# ---- the timeline ----

RANK = r'''
import os, sys, time
import numpy
import ringd
from ringd.errors import MembershipChanged
steps, stop_file = int(sys.argv[1]), sys.argv[2]
s = ringd.Session(min_size=1)
# two small enough to come back with the negotiation (--direct-bytes), three that fuse on the ring
bufs = [s.array((n,), numpy.float32) for n in (3, 5000, 10000, 20000, 50)]
step = 0
while step < steps and not os.path.exists(stop_file):
    for b in bufs:
        b[:] = 1.0
    hs = [s.allreduce_async(f"grad{i}", b, b) for i, b in enumerate(bufs)]
    changed = False
    for h in hs:  # every handle waited, also after one failed: their names are free again
        try:
            h.wait()
        except MembershipChanged:
            changed = True
    if changed:
        s.expect_generation(s.generation)
    else:
        assert all(float(b[0]) == s.size for b in bufs), [float(b[0]) for b in bufs]
    step += 1
    time.sleep(0.005)
print("rank done at size", s.size, "after", step, "steps")
s.close()
'''


def rank_env(d, job, extra=None):
    env = dict(os.environ, RINGD_SOCKET=d.sock, RINGD_JOB=job, RINGD_WORLD_SIZE="2",
               RINGD_LOCAL_SIZE="1", RINGD_MIN_SIZE="1",
               PYTHONPATH=os.path.join(ROOT, "python"))
    env.update(extra or {})
    return env


def check_trace(path):
    """The trace at path: valid JSON, every op's phases in order; returns its events."""
    with open(path) as f:
        ev = json.load(f)
    rows = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and
            e["name"] == "process_name"}
    ops = [e for e in ev if e["ph"] == "X" and e["name"] == "ALLREDUCE"]
    assert ops, ev[:20]
    order = ["WAIT_FOR_RANKS", "NEGOTIATE", "QUEUE", "XFER_QUEUE", "LOCAL_REDUCE",
             "REDUCE_SCATTER", "ALLGATHER", "RING", "WRITE_BACK", "COMPLETE", "LOCAL"]
    phases = {}
    for e in ev:
        if e["ph"] == "X" and e["name"] in order:
            phases.setdefault((e["pid"], e["ts"] // 1), []).append(e)
    by_row = {}
    for e in ev:
        if e["ph"] == "X" and e["name"] in order:
            by_row.setdefault(e["pid"], []).append(e)
    for op in ops:
        assert op["pid"] in rows, (op, rows)  # every tensor's row is titled with its name
        start, end = op["ts"], op["ts"] + op["dur"]
        inside = sorted((e for e in by_row.get(op["pid"], [])
                         if start <= e["ts"] and e["ts"] + e["dur"] <= end),
                        key=lambda e: (e["ts"], order.index(e["name"])))
        names = [e["name"] for e in inside]
        assert names and names[0] == "WAIT_FOR_RANKS", (rows[op["pid"]], op, inside)
        # the phases follow one another, in the order of an op's life, never overlapping
        assert [order.index(n) for n in names] == sorted(order.index(n) for n in names), names
        for a, b in zip(inside, inside[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1, (a, b)
        if op["args"]["status"] == 0 and not op["args"]["direct"] and op["args"]["pass"]:
            assert {"REDUCE_SCATTER", "ALLGATHER", "WRITE_BACK"} <= set(names), names
    return ev


def recording(d, job):
    """Waits until d logs that it records job."""
    assert wait_for(lambda: f"job '{job}': recording for" in open(d.log).read(), 20), tail(d.log)


def test_timeline_of_a_two_node_job_with_fusion_and_a_membership_change(tmp_path):
    flags = ["--fusion-cycle-us", "3000", "--timeline-max-ops", "100000"]
    nodes = TwoNodes(tmp_path, [flags, flags])
    stop = tmp_path / "stop"
    ranks = []
    try:
        rec = subprocess.Popen([_binary("RINGCTL_BIN"), "--socket", nodes.daemons[0].sock,
                                "timeline", "--job", "tl", "--seconds", "12", "--out",
                                str(tmp_path / "tl.json")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        recording(nodes.daemons[0], "tl")  # before the job starts: recorded from when it comes
        for i, d in enumerate(nodes.daemons):
            env = rank_env(d, "tl", {"RINGD_TIMELINE": str(tmp_path / f"client{i}.%r.json")})
            ranks.append(subprocess.Popen(
                [sys.executable, "-c", RANK, "40" if i == 1 else "100000", str(stop)],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        # node n1's rank leaves after 40 steps: the ring changes, n0's rank goes on alone
        out1, err1 = ranks[1].communicate(timeout=120)
        assert ranks[1].returncode == 0, out1 + err1
        r_out, r_err = rec.communicate(timeout=60)
        assert rec.returncode == 0, r_out + r_err
        stop.write_text("")
        out0, err0 = ranks[0].communicate(timeout=60)
        assert ranks[0].returncode == 0 and "at size 1" in out0, out0 + err0
    finally:
        stop.write_text("")
        for r in ranks:
            if r.poll() is None:
                r.kill()
                r.communicate()
        nodes.close()
    assert re.search(r"\d+ ops of job 'tl' on node n0; [1-9]\d* ring changes; written to", r_err), \
        r_err
    ev = check_trace(tmp_path / "tl.json")
    marks = [e["args"]["what"] for e in ev if e["name"] == "MEMBERSHIP"]
    assert any(m.startswith("start: 2 ranks") for m in marks), marks
    # n1's only rank closed without a drain: a loss to rank 0, told who left, which shrinks
    assert any(m.startswith("shrink: 1 ranks") and re.search(r"rank 1 \(pid \d+, node n1\) left", m)
               for m in marks), marks
    passes = [e for e in ev if e["ph"] == "X" and e["name"].startswith("PASS ")]
    assert passes and max(p["args"]["ops"] for p in passes) > 1, "no fused pass recorded"
    assert [e for e in ev if e["ph"] == "i" and e["name"] == "SUBMIT rank 0"]
    # RINGD_TIMELINE: each rank wrote its own (%r), the same phases, its ring changes
    for i in range(2):
        files = list(tmp_path.glob(f"client{i}.*.json"))
        assert len(files) == 1, files
        cev = check_trace(files[0])
        assert [e for e in cev if e["name"] == "MEMBERSHIP"]
    cev0 = check_trace(next(tmp_path.glob("client0.*.json")))
    cmarks = [e["args"]["what"] for e in cev0 if e["name"] == "MEMBERSHIP"]
    assert any(re.search(r"rank 0 of 1$", m) for m in cmarks), cmarks


def test_a_timeline_stays_within_its_bound_and_says_what_it_dropped(tmp_path):
    d = Daemon(["--timeline-max-ops", "50"])
    try:
        rec = subprocess.Popen([_binary("RINGCTL_BIN"), "--socket", d.sock, "timeline", "--job",
                                "many", "--seconds", "3", "--out", str(tmp_path / "t.json")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        recording(d, "many")
        finish([bench(d, "many", "-b", "4", "-e", "4", "-n", "400", "-w", "0", world=1)], [d])
        _, err = rec.communicate(timeout=30)
        assert rec.returncode == 0, err
        m = re.search(r"(\d+) ops of job 'many'.*; (\d+) older records dropped", err)
        assert m and int(m.group(1)) == 50 and int(m.group(2)) >= 300, err
        ev = check_trace(tmp_path / "t.json")
        assert len([e for e in ev if e["name"] == "ALLREDUCE"]) == 50
    finally:
        assert d.stop() == 0, tail(d.log)
        d.remove()


def test_ringctl_timeline_refuses_bad_requests_clearly(tmp_path):
    d = Daemon()
    ctl = [_binary("RINGCTL_BIN"), "--socket", d.sock, "timeline"]
    try:
        out = str(tmp_path / "t.json")
        for args, code, why in [
                (["--seconds", "1", "--out", out], 2, "needs --job"),
                (["--job", "j", "--seconds", "0", "--out", out], 2, "bad value '0' for --seconds"),
                (["--job", "j", "--seconds", "1"], 2, "needs --job J"),
                (["--job", "j", "--seconds", "1", "--out", "/nonexistent/t.json"], 2,
                 "No such file or directory"),
                (["--job", "bad\x01name", "--seconds", "1", "--out", out], 1,
                 "a timeline needs a job name")]:
            r = subprocess.run(ctl + args, capture_output=True, text=True, timeout=20)
            assert r.returncode == code and why in r.stderr, (args, r.returncode, r.stderr)
        with open(out, "w") as f:
            f.write("an earlier trace")
        first = subprocess.Popen(ctl + ["--job", "j", "--seconds", "3", "--out", out],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        recording(d, "j")
        r = subprocess.run(ctl + ["--job", "j", "--seconds", "1", "--out", out + "2"],
                           capture_output=True, text=True, timeout=20)
        assert r.returncode == 1 and "being recorded already" in r.stderr, r.stderr
        assert not os.path.exists(out + "2")
        assert open(out).read() == "an earlier trace"  # replaced only once the new one is there
        _, err = first.communicate(timeout=30)
        assert first.returncode == 0 and "ran no ops on node" in err, err
        assert json.load(open(out))  # an empty recording is still a trace
        # an asker that goes away ends its recording: the job can be recorded again at once
        gone = subprocess.Popen(ctl + ["--job", "k", "--seconds", "60", "--out", out],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        recording(d, "k")
        gone.kill()
        gone.communicate()
        r = subprocess.run(ctl + ["--job", "k", "--seconds", "1", "--out", out],
                           capture_output=True, text=True, timeout=20)
        assert r.returncode == 0, r.stderr
    finally:
        assert d.stop() == 0, tail(d.log)
        d.remove()


def test_ringctl_watch_refreshes_the_status():
    d = Daemon()
    try:
        r = subprocess.run([_binary("RINGCTL_BIN"), "--socket", d.sock, "watch", "--interval",
                            "200", "--count", "3"], capture_output=True, text=True, timeout=20)
        assert r.returncode == 0, r.stderr
        frames = re.findall(r"^ringctl watch .*: every 0\.2 s, \d\d:\d\d:\d\d$", r.stdout, re.M)
        assert len(frames) == 3 and r.stdout.count("ringd ") >= 3, r.stdout
        bad = subprocess.run([_binary("RINGCTL_BIN"), "--socket", d.sock, "watch", "--interval",
                              "5"], capture_output=True, text=True, timeout=20)
        assert bad.returncode == 2 and "bad value '5' for --interval" in bad.stderr
    finally:
        d.stop()
        d.remove()
    # a daemon that is gone is shown as such, every frame
    r = subprocess.run([_binary("RINGCTL_BIN"), "--socket", d.sock, "watch", "--interval", "100",
                        "--count", "2"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 1 and r.stderr.count("ringctl: ") == 2, r.stderr


LOCAL_RANK = r'''
import sys, ringd
s = ringd.Session(job="pair", world_size=2, local_size=2, min_size=1)
s.barrier("both")
if sys.argv[1] == "leave":
    s.close()
    sys.exit(0)
try:
    s.barrier("after")
except ringd.MembershipChanged:
    pass
s.barrier("alone")
print("alone at size", s.size)
s.close()
'''


def test_a_process_leaving_a_one_node_job_counts_as_a_shrink():
    d = Daemon()
    try:
        env = dict(os.environ, RINGD_SOCKET=d.sock, PYTHONPATH=os.path.join(ROOT, "python"))
        ps = [subprocess.Popen([sys.executable, "-c", LOCAL_RANK, what], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for what in ("stay", "leave")]
        outs = [p.communicate(timeout=60) for p in ps]
        assert all(p.returncode == 0 for p in ps), outs
        assert "alone at size 1" in outs[0][0], outs
        text = subprocess.run([_binary("RINGCTL_BIN"), "--socket", d.sock, "metrics"],
                              capture_output=True, text=True, timeout=10).stdout
        got = {c: sample(text, "ringd_membership_changes_total", job="pair", cause=c)
               for c in ("start", "join", "leave", "shrink", "reform")}
        assert got == {"start": 1, "join": 0, "leave": 0, "shrink": 1, "reform": 0}, got
    finally:
        assert d.stop() == 0, tail(d.log)
        d.remove()


def test_connections_that_use_up_the_daemons_files_neither_spin_it_nor_stop_it(tmp_path):
    """With every fd taken by metrics connections, accepting pauses instead of spinning the loop
    every job runs on, and everything is served again once they go."""
    import resource
    sock = str(tmp_path / "s.sock")
    log = tmp_path / "ringd.log"
    with open(log, "wb") as out:
        p = subprocess.Popen([_binary("RINGD_BIN"), "--socket", sock, "--metrics-listen",
                              "127.0.0.1:0"], stdout=out, stderr=subprocess.STDOUT,
                             env=_env_for_servers(),
                             preexec_fn=lambda: (_die_with_parent(), resource.setrlimit(
                                 resource.RLIMIT_NOFILE, (64, 64))))
    held = []
    try:
        assert wait_for(lambda: "Prometheus metrics at http://" in log.read_text(), 20), \
            log.read_text()
        addr = re.search(r"metrics at http://(\S+)/metrics", log.read_text()).group(1)
        host, port = addr.rsplit(":", 1)
        for _ in range(100):  # more than the daemon may open
            held.append(socket.create_connection((host, int(port)), timeout=5))
        assert wait_for(lambda: "Too many open files; pausing" in log.read_text(), 20)

        def cpu():
            f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        c0 = cpu()
        time.sleep(2)
        assert cpu() - c0 < 1.0, "the daemon spins while it cannot accept"
        for s in held:
            s.close()
        held.clear()
        r = subprocess.run([_binary("RINGCTL_BIN"), "--socket", sock, "status"],
                           capture_output=True, text=True, timeout=20)
        assert r.returncode == 0, r.stderr
        assert wait_for(lambda: "ringd_uptime_seconds" in scrape(addr), 20)
    finally:
        for s in held:
            s.close()
        p.terminate()
        p.wait(20)
