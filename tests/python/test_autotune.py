"""--autotune and the coordinator's tuning: two real daemons through a redis-server, a model's
gradients from ringd-bench with every result checked, the tuning read back with ringctl."""
import re
import subprocess

from conftest import TwoNodes, _binary, ring_of, wait_for


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
