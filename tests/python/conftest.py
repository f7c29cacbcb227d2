# Fixtures of the Python tests: real redis-server and ringd processes, and rank processes.
"""Test clusters: ringd daemons (one node alone, or several through a redis-server) on
temporary sockets and ephemeral ports, and one process per rank (ranks.serve) running the
functions a test sends. Every wait is bounded; whatever a test leaves behind is stopped, and a
daemon that does not shut down cleanly (under the sanitizers: that leaked) fails the run.

Environment (set by tests/meson.build): RINGD_BIN, RINGCTL_BIN, RINGD_LIBRARY, and for a
sanitizer build LD_PRELOAD (libasan) with ASAN_OPTIONS ending in detect_leaks=0, for the Python
processes only: the daemons get the environment without LD_PRELOAD and with leak detection on.
"""
import ctypes
import json
import multiprocessing
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ranks  # noqa: E402  (the rank processes import it by this name)

_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """preexec_fn: the child gets SIGKILL when the test process dies, so nothing outlives it."""
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _env_for_servers():
    """The environment of daemons and redis: no LD_PRELOAD, no RINGD_* of the tests, and
    LeakSanitizer back on (the last of repeated ASAN_OPTIONS wins)."""
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith("RINGD_")}
    if "ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] += ":detect_leaks=1"
    return env


def _binary(var):
    path = os.environ.get(var)
    if not path or not os.access(path, os.X_OK):
        pytest.fail(f"{var} is not set to an executable (meson test sets it)", pytrace=False)
    return path


def wait_for(cond, timeout, every=0.02):
    """True once cond() holds, False after timeout seconds."""
    end = time.monotonic() + timeout
    while True:
        if cond():
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(every)


def free_port():
    """A port free now, taken at random below the kernel's ephemeral range: a port bound to 0
    comes from that range, where any outgoing connection may take it before its user (a
    TCPStore, a redis-server) binds it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    first = 10000 if low > 11000 else 1024
    if low - first < 1000:  # no room below that range: any free port
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    for _ in range(1000):
        port = random.randrange(first, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {first} and {low}")


def tail(path, nbytes=3000):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - nbytes))
            return f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"({path}: {e})"


class Redis:
    """redis-server on 127.0.0.1 and a free port, in its own directory, persisting nothing."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ringd-py-redis.")
        self.log = os.path.join(self.dir, "redis.log")
        self.proc = None
        for _ in range(5):
            self.port = free_port()
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                     "--save", "", "--appendonly", "no", "--dir", self.dir],
                    stdout=log, stderr=subprocess.STDOUT, env=_env_for_servers(),
                    preexec_fn=_die_with_parent)
            if wait_for(self._pong, 5):
                self.url = f"redis://127.0.0.1:{self.port}"
                return
            self.stop()
        raise RuntimeError(f"redis-server did not come up: {tail(self.log)}")

    def _pong(self):
        if self.proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def remove(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Daemon:
    """One ringd on a socket of its own temporary directory, logging to a file there."""

    def __init__(self, extra=()):
        self.dir = tempfile.mkdtemp(prefix="ringd-py.")
        self.sock = os.path.join(self.dir, "ringd.sock")
        self.log = os.path.join(self.dir, "ringd.log")
        self.extra = list(extra)
        self.start()

    def start(self):
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [_binary("RINGD_BIN"), "--socket", self.sock, "--log-level", "info"] + self.extra,
                stdout=log, stderr=subprocess.STDOUT, env=_env_for_servers(),
                preexec_fn=_die_with_parent)
        ringctl = _binary("RINGCTL_BIN")

        def answers():
            if self.proc.poll() is not None:
                raise RuntimeError(f"ringd exited with {self.proc.returncode}: {tail(self.log)}")
            return subprocess.run([ringctl, "--socket", self.sock, "status"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  env=_env_for_servers(), timeout=5).returncode == 0

        if not wait_for(answers, 10, every=0.05):
            self.kill()
            raise RuntimeError(f"ringd did not answer on {self.sock}: {tail(self.log)}")

    def kill(self):
        """SIGKILL: the node is gone."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        """SIGTERM and wait: the exit status (0: clean, and under the sanitizers leak-free);
        None when it had to be killed."""
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.terminate()
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def remove(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """nodes daemons (through a redis-server when more than one) and local rank processes on
    each, every rank with a session of job "<tag>.core" open (ranks.serve)."""

    op_timeout_ms = 30000

    def __init__(self, nodes, local, tag):
        self.nodes, self.local, self.world = nodes, local, nodes * local
        self.tag = tag
        self.tmp = tempfile.mkdtemp(prefix="ringd-py-cluster.")
        self.redis = None
        self.daemons = []
        self.workers = []  # (process, connection)
        self.broken = None  # why the cluster cannot run another test
        try:
            self._start()
        except BaseException:
            self.close(judge=False)
            raise

    def _start(self):
        extra = []
        if self.nodes > 1:
            self.redis = Redis()
            key = os.path.join(self.tmp, "ring.key")
            with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write("python tests' ring key, 32 bytes")
            extra = ["--redis", self.redis.url, "--listen", "127.0.0.1:0", "--key-file", key,
                     "--lease-ttl", "1000"]
        for i in range(self.nodes):
            node = ["--node", f"n{i}"] if self.nodes > 1 else []
            self.daemons.append(Daemon(extra + node))
        # Forked from this process, which has torch imported already (an import under ASan
        # takes seconds); it runs no threads of its own, and the children use nothing of its
        # sessions (they leave by os._exit, running no finalizers).
        ctx = multiprocessing.get_context("fork")
        for i in range(self.world):
            config = {"socket": self.daemons[i // self.local].sock, "world": self.world,
                      "local": self.local, "tag": self.tag, "tmp": self.tmp, "index": i,
                      "op_timeout_ms": self.op_timeout_ms}
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=ranks.serve, args=(theirs, config), daemon=True,
                            name=f"rank-process-{i}")
            p.start()
            theirs.close()
            self.workers.append((p, mine))
        self.ranks = self._collect(60, "opening the sessions")

    def evidence(self):
        """The end of every daemon's log, for a failure's message."""
        parts = [f"---- ringd n{i} ({d.log}) ----\n{tail(d.log)}"
                 for i, d in enumerate(self.daemons)]
        return "\n".join(parts)

    def _collect(self, timeout, what):
        """Every worker's reply within timeout seconds: {rank: value}. Raises AssertionError
        naming the ranks that failed (with their tracebacks) or did not answer."""
        end = time.monotonic() + timeout
        replies, errors, silent = {}, [], []
        for i, (p, conn) in enumerate(self.workers):
            left = max(0.0, end - time.monotonic())
            try:
                msg = conn.recv() if conn.poll(left) else None
            except (EOFError, OSError):  # the process died
                msg = None
            if msg is None:
                p.join(0.5)
                state = (f"exited with {p.exitcode}" if p.exitcode is not None
                         else f"no answer within {timeout} s")
                silent.append(f"process {i} {state}")
                continue
            kind, rank, value = msg
            if kind == "ok":
                replies[rank] = value
            else:
                errors.append(f"rank {rank} (process {i}):\n{value}")
        if silent:
            self.broken = f"{what}: " + ", ".join(silent)
        if errors or silent:
            raise AssertionError(f"{what}: " + "; ".join(silent) + "\n" + "\n".join(errors)
                                 + "\n" + self.evidence())
        return replies

    def run(self, fn, *args, timeout=90):
        """Runs fn(*args) on every rank at once; returns [value of rank 0, rank 1, ...]."""
        if self.broken:
            raise AssertionError(f"cluster unusable: {self.broken}")
        for _, conn in self.workers:
            conn.send((fn, args))
        replies = self._collect(timeout, f"{fn.__name__}{args!r}")
        return [replies[r] for r in sorted(replies)]

    def close(self, judge=True):
        """Stops the ranks, then the daemons; with judge, raises AssertionError when a daemon
        did not shut down cleanly (exit status 0: under the sanitizers also no leak)."""
        for p, conn in self.workers:
            try:
                conn.send(None)
            except OSError:
                pass
        for p, conn in self.workers:
            p.join(15)
            if p.is_alive():
                p.kill()
                p.join(5)
        problems = []
        for i, d in enumerate(self.daemons):
            rc = d.stop()
            if rc != 0 and judge and not self.broken:
                problems.append(f"ringd n{i} exit status {rc}:\n{tail(d.log, 6000)}")
        for d in self.daemons:
            d.remove()
        if self.redis is not None:
            self.redis.remove()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if problems:
            raise AssertionError("daemons did not shut down cleanly:\n" + "\n".join(problems))


_clusters = {}


def _cluster(request, nodes, local):
    key = (nodes, local)
    c = _clusters.get(key)
    if c is not None and c.broken:
        del _clusters[key]
        c.close(judge=False)
        c = None
    if c is None:
        c = Cluster(nodes, local, tag=f"py{nodes}x{local}.{os.getpid()}.{len(_clusters)}")
        _clusters[key] = c
    return c


@pytest.fixture(scope="session", autouse=True)
def _close_clusters():
    yield
    failures = []
    while _clusters:
        _, c = _clusters.popitem()
        try:
            c.close()
        except AssertionError as e:
            failures.append(str(e))
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)


@pytest.fixture
def one_node(request):
    """One daemon, two local ranks (a one-node ring through shared memory)."""
    return _cluster(request, 1, 2)


@pytest.fixture
def two_nodes(request):
    """Two daemons through a redis-server, two local ranks each (4 ranks)."""
    return _cluster(request, 2, 2)


@pytest.fixture
def two_single_nodes(request):
    """Two daemons through a redis-server, one rank each (the ring works in the output)."""
    return _cluster(request, 2, 1)


@pytest.fixture(params=["one_node", "two_nodes"])
def cluster(request):
    """Each test taking it runs on one node (1x2) and on two nodes (2x2)."""
    return request.getfixturevalue(request.param)


@pytest.fixture
def daemon():
    """A daemon of the test's own, stopped (and judged) at the end."""
    d = Daemon()
    yield d
    rc = d.stop()
    log = tail(d.log, 6000)
    d.remove()
    assert rc == 0 or rc == -signal.SIGKILL, f"ringd exit status {rc}:\n{log}"


# ---- two nodes running ringd-bench (the autotune and observability tests) ----

SMALL_MODEL = "# sizes around the direct, ring and fusion limits\n" \
              "bias 3\nweight 70000\nemb 1000003\nnorm 512\nhead 5000\nproj 300000\n"


def status(d):
    r = subprocess.run([_binary("RINGCTL_BIN"), "--socket", d.sock, "status", "--json"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def ring_of(d, job):
    for j in status(d)["jobs"]:
        if j["name"] == job:
            return j.get("ring")
    return None


class TwoNodes:
    """Two daemons through a redis-server (flags[i] for node n<i>) and the small model file."""

    def __init__(self, tmp_path, flags):
        self.key = tmp_path / "ring.key"
        self.key.write_text("python tests' ring key, 32 bytes")
        os.chmod(self.key, 0o600)
        self.model = tmp_path / "small"
        self.model.write_text(SMALL_MODEL)
        self.redis, self.daemons, self.ranks = Redis(), [], []
        try:
            for i in range(2):  # each starts as it is made
                self.daemons.append(Daemon(["--redis", self.redis.url, "--listen", "127.0.0.1:0",
                                            "--key-file", str(self.key), "--node", f"n{i}"]
                                           + flags[i]))
        except BaseException:
            self.close()
            raise

    def start(self, job, iters):
        """A rank on each node running the small model iters times (one checked step more)."""
        args = ["--procs", "1", "--world", "2", "--job", job, "--model", str(self.model),
                "-n", str(iters), "-w", "1"]
        # each in a process group of its own: ringd-bench forks its ranks, which kill_ranks
        # must stop too
        self.ranks = [subprocess.Popen([_binary("RINGD_BENCH_BIN"), "--socket", d.sock, *args],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       start_new_session=True)
                      for d in self.daemons]

    def finish(self):
        """Waits for the ranks; returns their output, all of it from successful runs."""
        outs = [r.communicate(timeout=180) for r in self.ranks]
        logs = "\n".join(tail(d.log) for d in self.daemons)
        for r, (out, err) in zip(self.ranks, outs):
            assert r.returncode == 0, out + err + logs
        return outs[0][0] + outs[1][0]

    def checked_run(self, job):
        """Stops the ranks running, then runs job for 200 steps, every result right."""
        self.kill_ranks()
        self.start(job, 200)
        out = self.finish()
        assert "# #wrong 0" in out, out

    def kill_ranks(self):
        for r in self.ranks:
            try:
                os.killpg(r.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            r.communicate(timeout=30)

    def logs(self):
        return [open(d.log).read() for d in self.daemons]

    def close(self):
        self.kill_ranks()
        for d in self.daemons:
            d.stop()
            d.remove()
        self.redis.stop()
        self.redis.remove()
