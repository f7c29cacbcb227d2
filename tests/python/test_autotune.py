"""--autotune and the coordinator's tuning: two real daemons through a redis-server, a model's
gradients from ringd-bench with every result checked, the tuning read back with ringctl."""
import json
import os
import re
import signal
import subprocess

from conftest import Daemon, Redis, _binary, tail, wait_for

SMALL_MODEL = "# sizes around the direct, ring and fusion limits\n" \
              "bias 3\nweight 70000\nemb 1000003\nnorm 512\nhead 4096\nproj 300000\n"


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


def test_autotune_settles_on_one_setting_that_every_node_runs_and_logs(tmp_path):
    flags = ["--autotune", "--autotune-window-ms", "40", "--conns-per-link", "3"]
    nodes, seen = TwoNodes(tmp_path, [flags, flags]), {}
    try:
        # a job that outlasts the tuning on any machine: stopped once both nodes settled
        nodes.start("tune", 1_000_000)

        def both():
            for r in nodes.ranks:
                assert r.poll() is None, f"a rank ended while tuning (exit {r.returncode})"
            rings = [ring_of(d, "tune") for d in nodes.daemons]
            if any(r is None or "tuning" not in r for r in rings):
                return False
            seen["rings"] = rings
            return all(r["tuning"]["autotune"] == "settled" for r in rings)
        assert wait_for(both, 150, every=0.2), f"not settled on both nodes: {seen}"
        text = [subprocess.run([_binary("RINGCTL_BIN"), "--socket", d.sock, "status"],
                               capture_output=True, text=True, timeout=10).stdout
                for d in nodes.daemons]
        logs = nodes.logs()
        # every setting it tries moves the data right: a checked run on the same daemons, a new
        # job whose ring tunes again from the flags while it runs
        nodes.checked_run("tune-check")
    finally:
        nodes.close()
    r0, r1 = seen["rings"]
    keys = ("fusion_threshold", "cycle_us", "segment_size", "conns")
    assert [r0["tuning"][k] for k in keys] == [r1["tuning"][k] for k in keys], seen
    coord = 0 if r0["position"] == 0 else 1
    c = seen["rings"][coord]["tuning"]
    assert c["autotune_trials"] >= 5 and c["autotune_best_bps"] > 0, c
    assert 1 <= c["conns"] <= 3 and 4096 <= c["segment_size"] <= 1 << 20, c
    # each node logs what it settled on; the coordinator also how well it did
    for i, log in enumerate(logs):
        m = re.search(r"job 'tune': autotune settled on fusion threshold (\S+), cycle (\d+) us, "
                      r"segment (\S+), (\d) connections?", log)
        assert m, f"node n{i} logged no settled tuning:\n{log[-3000:]}"
        assert int(m.group(4)) == c["conns"] and int(m.group(2)) == c["cycle_us"]
    assert re.search(r"autotune settled on .*GB/s ordered, after \d+ settings tried", logs[coord])
    assert all("(autotune settled, " in t for t in text), text


def test_nodes_with_different_fusion_flags_run_the_coordinators(tmp_path):
    """Fusion groups are decided per order: each node grouping by its own --fusion-threshold
    would pair different ops on the two ends of a link."""
    flags = [["--fusion-threshold", "1M", "--fusion-cycle-us", "2000"],
             ["--fusion-threshold", "32M"]]
    nodes, seen = TwoNodes(tmp_path, flags), {}
    try:
        nodes.start("mixed", 1_000_000)  # stopped once both nodes showed their tuning

        def shown():
            for r in nodes.ranks:
                assert r.poll() is None, f"a rank ended (exit {r.returncode})"
            rings = [ring_of(d, "mixed") for d in nodes.daemons]
            seen["rings"] = rings
            return all(r is not None and "tuning" in r for r in rings)
        assert wait_for(shown, 60, every=0.1), f"no tuning shown: {seen}"
        nodes.checked_run("mixed-check")
    finally:
        nodes.close()
    r0, r1 = seen["rings"]
    coord = 0 if r0["position"] == 0 else 1
    want = (1 << 20, 2000) if coord == 0 else (32 << 20, 0)
    for r in (r0, r1):
        t = r["tuning"]
        assert (t["fusion_threshold"], t["cycle_us"], t["autotune"]) == (*want, "off"), seen
