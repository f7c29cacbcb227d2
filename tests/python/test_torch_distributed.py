# The torch.distributed backend "ringd": real torch processes launched as torchrun launches them.
"""Each test starts real daemons (one node, or two through a redis-server) and one Python process
per rank running dist_worker.py with torch's launch variables, or torchrun itself, and checks
what every rank reports. Gloo groups of the same ranks are the reference for DDP and ZeRO."""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import Daemon, Redis, free_port, tail

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "dist_worker.py")


class Nodes:
    """n daemons (through a redis-server when n > 1), named n0, n1, ..."""

    def __init__(self, tmp_path, n):
        self.redis, self.daemons = None, []
        try:
            extra = []
            if n > 1:
                self.redis = Redis()
                key = tmp_path / "ring.key"
                key.write_text("python tests' ring key, 32 bytes")
                os.chmod(key, 0o600)
                extra = ["--redis", self.redis.url, "--listen", "127.0.0.1:0", "--key-file",
                         str(key), "--lease-ttl", "1000"]
            for i in range(n):
                self.daemons.append(Daemon(extra + (["--node", f"n{i}"] if n > 1 else [])))
        except BaseException:
            self.close()
            raise

    def evidence(self):
        return "\n".join(f"---- ringd n{i} ----\n{tail(d.log)}" for i, d in enumerate(self.daemons))

    def close(self):
        rcs = [d.stop() for d in self.daemons]
        logs = self.evidence()
        for d in self.daemons:
            d.remove()
        if self.redis is not None:
            self.redis.remove()
        assert all(rc in (0, None) for rc in rcs), f"daemon exit status {rcs}:\n{logs}"


@pytest.fixture
def nodes(tmp_path):
    made = []

    def make(n):
        made.append(Nodes(tmp_path, n))
        return made[-1]

    yield make
    for m in made:
        m.close()


def _env(sock, extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("RINGD_") or k == "RINGD_LIBRARY"}
    env.update(RINGD_SOCKET=sock, GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1")
    env.update(extra)
    return env


def launch(cluster, local, scenarios, torch_rank=None, env=None, timeout=150, exits=None,
           local_vars=True):
    """One process per rank, local per daemon, running dist_worker.py's scenarios; returns
    {torch rank: its RESULT}. torch_rank(i): the torch rank of the i-th process (processes
    0..local-1 on n0, ...). exits: {torch rank: the exit status expected instead of 0 and a
    RESULT}. local_vars False: no LOCAL_RANK and LOCAL_WORLD_SIZE (as mp.spawn launches)."""
    world = local * len(cluster.daemons)
    port = free_port()
    exits = exits or {}
    procs = []
    for i in range(world):
        rank = torch_rank(i) if torch_rank else i
        given = dict(env or {}, MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
        if local_vars:
            given.update(LOCAL_RANK=str(i % local), LOCAL_WORLD_SIZE=str(local))
        e = _env(cluster.daemons[i // local].sock, given)
        procs.append((rank, subprocess.Popen([sys.executable, WORKER, *scenarios], env=e,
                                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                             text=True)))
    out, end = {}, time.monotonic() + timeout
    try:
        for rank, p in procs:
            try:
                text, _ = p.communicate(timeout=max(1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                text, _ = p.communicate()
                text += f"\n(killed after {timeout} s)"
            out[rank] = (p.returncode, text)
    finally:
        for _, p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    results, problems = {}, []
    for rank, (rc, text) in sorted(out.items()):
        if rank in exits:
            if rc != exits[rank]:
                problems.append(f"rank {rank}: exit status {rc}, not {exits[rank]}:\n{text}")
            continue
        lines = [ln for ln in text.splitlines() if ln.startswith("RESULT ")]
        if rc != 0 or not lines:
            problems.append(f"rank {rank}: exit status {rc}:\n{text[-4000:]}")
        else:
            results[rank] = json.loads(lines[-1][len("RESULT "):])
    assert not problems, "\n".join(problems) + "\n" + cluster.evidence()
    return results


def test_every_collective_in_every_form_on_one_node(nodes):
    """allreduce (every op, dtype, a strided tensor), broadcast from every root, allgather
    (also of differing sizes), the tensor forms, reduce_scatter, all_to_all_single with even
    and uneven splits, all_to_all, barrier, reduce, gather, scatter, object collectives, async
    Works and their futures, overlapping groups; and send refused with a clear error."""
    res = launch(nodes(1), 3, ["ops", "groups"])
    assert sorted(res) == [0, 1, 2] and all(r["ops"] == "ok" for r in res.values())


def test_a_collective_called_differently_on_one_rank_fails_on_every_rank_at_once(nodes):
    res = launch(nodes(1), 3, ["mismatch"])
    for rank, r in res.items():
        for m in r["mismatch"]:
            assert m["s"] < 5, (rank, m)
            assert m["error"] in ("Mismatch", "InvalidArgument"), (rank, m)
    # each rank's report names the collective's group name ("torch.<n>")
    assert all("torch." in m["message"] for r in res.values() for m in r["mismatch"])


def test_ddp_and_zero_on_two_ranks_equal_gloo_bit_for_bit(nodes):
    res = launch(nodes(1), 2, ["ddp", "zero"])
    for rank, r in res.items():
        assert r["ddp_identical"], (rank, r)
        assert r["zero_identical"], (rank, r)


def test_ddp_with_powersgd_whose_callbacks_run_collectives(nodes):
    """A communication hook whose future callbacks start collectives and wait for them (torch's
    PowerSGD) neither hangs nor differs from Gloo's."""
    res = launch(nodes(1), 2, ["powersgd"], timeout=120)
    for rank, r in res.items():
        assert r["powersgd_diff"] <= 1e-5, (rank, r)


def test_a_callback_still_running_when_the_script_ends_finishes_before_the_process_exits(
        nodes, tmp_path):
    """A callback on a collective's future, still running (1 s) when the script returns: the
    process runs it to its end before exiting, with status 0 (it was lost at exit, and its thread
    stopped inside torch's C++ future code aborted the process)."""
    res = launch(nodes(1), 2, ["exit_in_callback"], env={"DIST_OUT": str(tmp_path)})
    for rank in res:
        path = tmp_path / f"callback.{rank}"
        assert path.exists(), f"rank {rank}'s callback never finished"
        assert path.read_text() == "ringd-torch-futures [4.0, 4.0, 4.0, 4.0]", (rank, path)


def test_a_forked_child_is_refused_the_group_whose_work_goes_on_in_the_parent(nodes, tmp_path):
    """A child forked while a Work is pending (a data loader's worker, say): waiting for it or
    starting a collective there raises naming the fork instead of hanging on threads the child
    does not have, and the parent's Work finishes."""
    res = launch(nodes(1), 2, ["fork"], env={"DIST_OUT": str(tmp_path)})
    for rank, r in res.items():
        assert r["fork"] == [3.0, 3.0, 3.0, 2.0, 2.0], (rank, r)


def test_two_nodes_with_torch_ranks_in_another_order_than_ringd_s(nodes):
    """2 daemons x 2 ranks; torch's ranks 1, 2 on node n0 and 3, 0 on n1 (ringd numbers n0
    first, so ringd's order of torch's ranks is a cycle that is not its own inverse): roots,
    gathers, splits and groups follow torch's numbering; DDP and ZeRO within 1e-6 of Gloo's."""
    res = launch(nodes(2), 2, ["ops", "groups", "ddp", "zero"], torch_rank=lambda i: (i + 1) % 4)
    assert sorted(res) == [0, 1, 2, 3]
    for rank, r in res.items():
        assert r["ops"] == "ok" and r["groups"] == "ok"
        assert r["ddp_diff"] <= 1e-6 and r["zero_diff"] <= 1e-6, (rank, r)


@pytest.mark.parametrize("n_nodes", [1, 2])
def test_ranks_launched_without_local_variables_count_each_node_s_ranks(nodes, n_nodes):
    """RANK, WORLD_SIZE and MASTER_* alone (mp.spawn, torch's own test harness): each rank counts
    the ranks of its daemon through torch's store, torch ranks interleaved across the nodes."""
    res = launch(nodes(n_nodes), 2, ["reinit"],
                 torch_rank=lambda i: (i % 2) * n_nodes + i // 2 if n_nodes > 1 else i,
                 local_vars=False)
    assert sorted(res) == list(range(2 * n_nodes)), res
    assert all(r["size"] == 2 * n_nodes for r in res.values()), res


def test_destroy_then_init_process_group_again_on_two_nodes(nodes):
    """Each world a process opens is a ringd job of its own ("<job>.<k>"), so a rank that
    re-initialises first never meets its peers' sessions of the last world."""
    res = launch(nodes(2), 1, ["reinit"])
    jobs = [r["reinit_jobs"] for r in res.values()]
    assert jobs[0] == jobs[1] and len(set(jobs[0])) == 5, jobs
    assert all(j.endswith(f".{k + 1}") for k, j in enumerate(jobs[0])), jobs


@pytest.mark.parametrize("n_nodes,local", [(2, 2), (3, 1)], ids=["a_node_keeps_a_rank",
                                                                "its_node_s_only_rank"])
def test_a_rank_killed_mid_step_ends_the_others_within_seconds(nodes, n_nodes, local):
    """Also when the dead rank was its node's only one: that node leaves the job, and the other
    nodes' ranks hear why instead of going on at the smaller size."""
    last = n_nodes * local - 1
    res = launch(nodes(n_nodes), local, ["killed"], exits={last: 17},
                 env={"DIST_NO_DESTROY": "1"}, timeout=90)
    for rank, r in res.items():
        assert r["killed_error"] == "MembershipChanged", (rank, r)
        assert r["killed_s"] < 10, (rank, r["killed_s"], r["killed_message"])
        assert f"rank {last} (pid " in r["killed_message"], (rank, r["killed_message"])


def test_a_rank_killed_in_ddp_training_ends_the_others_backward_with_an_error(nodes):
    res = launch(nodes(1), 3, ["ddp_killed"], exits={2: 17}, env={"DIST_NO_DESTROY": "1"},
                 timeout=90)
    for rank, r in res.items():
        assert r["ddp_killed_s"] < 10, (rank, r)
        assert "left job" in r["ddp_killed_message"], (rank, r["ddp_killed_message"])


def test_a_collective_one_rank_never_calls_fails_at_the_group_timeout(nodes):
    res = launch(nodes(1), 2, ["timeout"], env={"DIST_TIMEOUT": "2", "DIST_NO_DESTROY": "1"})
    r = res[0]
    assert r["timeout_error"] == "Timeout" and 1.5 <= r["timeout_s"] < 10, r


def test_fsdp_on_ringd_equals_fsdp_on_gloo(nodes):
    try:
        import torch.distributed.fsdp  # noqa: F401
    except Exception as e:  # noqa: BLE001 - torch 1.13's FSDP fails to import on Python 3.11
        pytest.skip(f"this torch's FSDP does not import here: {type(e).__name__}: {e}")
    res = launch(nodes(1), 2, ["fsdp"])
    for rank, r in res.items():
        assert r["fsdp_diff"] <= 1e-6, (rank, r)


def test_cuda_tensors_and_ddp_on_the_gpu(nodes):
    from test_torch_cuda import _why

    if _why is not None:
        pytest.skip(f"CUDA tensors: {_why}")
    res = launch(nodes(1), 2, ["cuda"])
    for rank, r in res.items():
        assert r["cuda_ddp_diff"] <= 1e-6, (rank, r)


def test_torchrun_nproc_per_node_2_end_to_end(nodes):
    """torchrun --standalone sets RANK, LOCAL_RANK, TORCHELASTIC_RUN_ID...: the job is
    torch.<run id>, and the workers train DDP and run every collective (torchrun.py: torchrun's
    main, with the one parser torch 1.13 breaks on Python 3.11 fixed)."""
    cluster = nodes(1)
    env = _env(cluster.daemons[0].sock, {})
    p = subprocess.run([sys.executable, os.path.join(HERE, "torchrun.py"), "--standalone",
                        "--nproc_per_node", "2", "--max_restarts", "0", WORKER, "ops", "ddp"],
                       env=env, capture_output=True, text=True, timeout=150)
    text = p.stdout + p.stderr
    assert p.returncode == 0, text + cluster.evidence()
    # the workers share torchrun's stdout: their lines may run together
    decoder = json.JSONDecoder()
    results = [decoder.raw_decode(part)[0] for part in p.stdout.split("RESULT ")[1:]]
    assert sorted(r["rank"] for r in results) == [0, 1], text
    assert all(r["ddp_identical"] and r["job"].startswith("torch.") for r in results), results
    assert len({r["job"] for r in results}) == 1, results


@pytest.mark.parametrize("example, args", [
    ("ddp_resnet.py", ["--model", "resnet18", "--steps", "2", "--warmup", "1", "--image-size",
                       "32", "--batch-size", "4"]),
    ("fsdp_mlp.py", ["--width", "64", "--steps", "3"]),
])
def test_the_examples_run_under_torchrun(nodes, example, args):
    if example.startswith("ddp"):
        pytest.importorskip("torchvision", reason="ddp_resnet.py trains torchvision's ResNet")
    if example.startswith("fsdp"):
        try:
            import torch.distributed.fsdp  # noqa: F401
        except Exception as e:  # noqa: BLE001 - torch 1.13's FSDP fails to import on 3.11
            pytest.skip(f"this torch's FSDP does not import here: {type(e).__name__}: {e}")
    cluster = nodes(1)
    script = os.path.join(HERE, "..", "..", "examples", "pytorch", example)
    p = subprocess.run([sys.executable, os.path.join(HERE, "torchrun.py"), "--standalone",
                        "--nproc_per_node", "2", "--max_restarts", "0", script, *args],
                       env=_env(cluster.daemons[0].sock, {}), capture_output=True, text=True,
                       timeout=150)
    assert p.returncode == 0, p.stdout + p.stderr + cluster.evidence()
    assert "on ringd" in p.stdout or "loss" in p.stdout, p.stdout


def test_the_job_name_comes_from_torchrun_or_the_master_address(monkeypatch):
    import ringd.torch.distributed as rd

    for k in ("RINGD_JOB", "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    assert rd._job_name() is None
    monkeypatch.setenv("MASTER_ADDR", "trainer-master-0")
    monkeypatch.setenv("MASTER_PORT", "23456")
    assert rd._job_name() == "torch.trainer-master-0:23456"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun without --rdzv-id
    assert rd._job_name() == "torch.trainer-master-0:23456"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "abc123")
    assert rd._job_name() == "torch.abc123"
    monkeypatch.setenv("RINGD_JOB", "mine")
    assert rd._job_name() is None  # the session takes RINGD_JOB itself
