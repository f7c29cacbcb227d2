# ringd.torch.elastic: TorchState and run, on one node, and across nodes killed, added and drained.
"""Elastic training the Horovod way. On the one-node cluster: commit/restore give back exactly
the committed state, sync takes the most advanced rank's state, run retries on
MembershipChanged (restore, callbacks, sync) within its bounds and stops on Closed. Across real
daemons: a ResNet-18 run keeps every
rank's parameters identical after every step while one node's daemon is killed (-9) and
another node joins, and a drained node's run stops with ringd.Closed while the others go on."""
import json
import multiprocessing
import os
import time
import traceback
import zlib

import pytest
import torch
import torch.nn.functional as F

import conftest
import ranks
import ringd
import ringd.torch
from ringd.torch import elastic

try:
    import torchvision  # imported here, once: the forked trainers inherit it
except ImportError:  # pragma: no cover - scripts/deps.sh installs python3-torchvision
    torchvision = None


def _mlp(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def _step(model, opt, rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x, y = torch.randn(5, 6, generator=g), torch.randn(5, 3, generator=g)
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    opt.step()


def _params(model):
    return [p.detach().clone() for p in model.parameters()]


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


# ---- one node: the state's own semantics ----

def r_commit_and_restore():
    hvd = ranks.hvd()
    r = hvd.rank()
    model = _mlp(1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    state = elastic.TorchState(model, opt, scheduler=sched, epoch=1, batch=2,
                               notes={"seen": [1]})
    _step(model, opt, r, 0)
    state.batch = 3
    state.commit()
    committed = _params(model)
    momentum = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    _step(model, opt, r, 1)
    sched.step()
    state.epoch, state.batch = 7, 9
    state.notes["seen"].append(2)
    assert not _same(_params(model), committed)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)
    state.restore()
    assert _same(_params(model), committed), "restore() did not give the committed parameters"
    assert _same([opt.state[p]["momentum_buffer"] for p in model.parameters()], momentum)
    assert (state.epoch, state.batch, state.notes) == (1, 3, {"seen": [1]})
    assert sched.last_epoch == 0 and opt.param_groups[0]["lr"] == pytest.approx(0.1)
    assert all(p.grad is None for p in model.parameters()), "gradients survived restore()"
    _step(model, opt, r, 1)  # the optimizer still works after its state was loaded back
    return True


def test_restore_gives_back_the_last_commit(one_node):
    assert one_node.run(r_commit_and_restore) == [True, True]


def r_sync_from_most_committed():
    hvd = ranks.hvd()
    r = hvd.rank()
    model = _mlp(100 + r)  # every rank starts elsewhere
    state = elastic.TorchState(model, torch.optim.SGD(model.parameters(), lr=0.1 * (r + 1)),
                               batch=10 * r)
    for _ in range(r + 1):  # the last rank has committed most
        state.commit()
    state.sync()
    fresh = _mlp(200 + r)
    fresh_state = elastic.TorchState(fresh, batch=r + 5)
    fresh_state.sync()  # nobody committed: rank 0's
    assert hvd.session().expected_generation is None, "sync() outside run() left a generation"
    assert _same(_params(model), _params(_mlp(100 + 1))), \
        "not the parameters of the rank with most commits"
    assert _same(_params(fresh), _params(_mlp(200))), "a fresh state did not take rank 0's"
    return state.batch, state.optimizer.param_groups[0]["lr"], fresh_state.batch


def test_sync_takes_the_state_of_the_rank_with_most_commits(one_node):
    for batch, lr, fresh_batch in one_node.run(r_sync_from_most_committed):
        assert (batch, fresh_batch) == (10, 5) and lr == pytest.approx(0.2), (batch, lr)


def r_elastic_sampler():
    """Horovod's ElasticSampler: disjoint shares covering the dataset; after a sync, the union
    of every rank's recorded batches is left out and the rest is shared anew; a restore goes
    back to the commit."""
    hvd = ranks.hvd()
    r, n = hvd.rank(), hvd.size()
    data = list(range(23))
    sampler = elastic.ElasticSampler(data, shuffle=True, seed=3)
    sampler.set_epoch(2)
    mine = list(iter(sampler))
    shares = hvd.allgather_object(mine, name="sampler.shares")
    assert len(sampler) == len(mine) == -(-23 // n), (len(sampler), mine)
    assert set().union(*map(set, shares)) == set(data), shares
    state = elastic.TorchState(sampler=sampler, epoch=2)
    sampler.record_batch(0, 4)  # this rank's first 4 samples
    sampler.record_batch(1, 4)
    done_here = set(mine[:8])
    state.commit()
    sampler.record_batch(2, 4)  # after the commit: undone by restore
    state.restore()
    assert sampler.processed_indices == done_here, sampler.processed_indices
    state.sync()
    done = set().union(*(set(share[:8]) for share in shares))
    assert sampler.processed_indices == done, (sampler.processed_indices, done)
    rest = list(iter(sampler))
    everyone = hvd.allgather_object(rest, name="sampler.rest")
    assert set().union(*map(set, everyone)) == set(data) - done, everyone
    assert not set(rest) & done, rest
    return len(rest)


def test_elastic_sampler_shares_the_samples_not_processed_yet(one_node):
    assert len(set(one_node.run(r_elastic_sampler))) == 1


def r_run_retries(outcome):
    """outcome: 'retry' (MembershipChanged once), 'closed' (Closed at once), 'limit'
    (MembershipChanged every time, under reset_limit=2)."""
    hvd = ranks.hvd()
    r = hvd.rank()
    model = _mlp(5)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    state = elastic.TorchState(model, opt, step=0)
    calls, resets = [], []
    state.register_reset_callbacks([lambda: resets.append((hvd.size(), state.step))])

    def train(state):
        calls.append(state.step)
        _step(model, opt, r, state.step)
        state.step += 1
        state.commit()
        _step(model, opt, r, state.step)  # not committed: undone by the reset
        state.step += 1
        if outcome == "closed":
            raise ringd.Closed(ringd.Result.CLOSED, "simulated drain")
        if outcome == "limit" or len(calls) == 1:
            raise ringd.MembershipChanged(ringd.Result.MEMBERSHIP, "simulated change")
        return state.step

    wrapped = elastic.run(train) if outcome != "limit" else elastic.run(reset_limit=2)(train)
    try:
        value = wrapped(state)
    except ringd.Error as e:
        value = f"{type(e).__name__}: {e.message}"
    assert hvd.session().expected_generation is None, "run() left a generation expected"
    return value, calls, resets, len(mpi_handles())


def mpi_handles():
    return ringd.torch.mpi_ops._handles


def test_run_restores_calls_back_and_retries_after_a_membership_change(one_node):
    for value, calls, resets, outstanding in one_node.run(r_run_retries, "retry"):
        # the second call starts from the commit after step 0 of the first
        assert (value, calls, resets, outstanding) == (3, [0, 1], [(2, 1)], 0)


def test_run_stops_on_closed_without_a_reset(one_node):
    for value, calls, resets, _ in one_node.run(r_run_retries, "closed"):
        assert value == "Closed: simulated drain" and calls == [0] and resets == []


def test_run_gives_up_after_its_reset_bounds(one_node):
    # Every call commits, so only reset_limit ends this one...
    for value, calls, resets, _ in one_node.run(r_run_retries, "limit"):
        assert value.startswith("MembershipChanged: elastic run: 3 membership changes, more "
                                "than reset_limit=2"), value
        assert len(calls) == 3 and len(resets) == 2
    # ...and a run that never commits ends after RESETS_WITHOUT_COMMIT resets in a row.
    for value, calls, resets, _ in one_node.run(r_no_commit):
        assert "membership changes in a row with no commit" in value, value
        assert len(calls) == elastic.RESETS_WITHOUT_COMMIT + 1, calls


def r_no_commit():
    hvd = ranks.hvd()
    state = elastic.ObjectState(step=0)
    calls = []

    @elastic.run
    def train(state):
        calls.append(state.step)
        raise ringd.MembershipChanged(ringd.Result.MEMBERSHIP, "simulated change")

    try:
        train(state)
        return "returned", calls, [], 0
    except ringd.MembershipChanged as e:
        assert hvd.session().expected_generation is None
        return e.message, calls, [], 0


def r_process_sets_made_again():
    """What elastic.State.sync does with the sync root's process sets: sets of an older
    generation are made again (the same ProcessSet objects, usable at once), a set the job
    cannot hold any more is gone saying why, and sets of the current generation are kept."""
    hvd = ranks.hvd()
    n = hvd.size()
    pair = hvd.add_process_set(list(range(n)))
    session_before = pair._session
    made_in, table, next_id = ringd.torch.mpi_ops._process_set_table()
    assert table == [(pair.process_set_id, list(range(n)))]
    ringd.torch.mpi_ops._renew_process_sets((made_in, table, next_id))  # current: kept
    assert pair._session is session_before
    # as after a change, the root having added and removed a set since: ids go on from its
    stale = (made_in - 1, table + [(pair.process_set_id + 1, [0, n])], next_id + 5)
    ringd.torch.mpi_ops._renew_process_sets(stale)
    assert pair._session is not session_before and session_before.closed
    got = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum, process_set=pair, name="again")
    assert got.item() == n, got
    assert len(ringd.torch.mpi_ops._process_sets) == 1  # the set of rank n is not made
    assert hvd.add_process_set([0]).process_set_id == next_id + 5
    hvd.remove_process_set(pair)
    return True


def test_process_sets_are_made_again_after_a_membership_change(one_node):
    assert one_node.run(r_process_sets_made_again) == [True, True]


# ---- across nodes: killed, added, drained ----

def _log(path, **event):
    event["t"] = round(time.time(), 3)
    with open(path, "a") as f:
        f.write(json.dumps(event) + "\n")


def _events(path):
    """The JSON lines a trainer wrote so far (a line being written is left out)."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                if line.endswith("\n"):
                    out.append(json.loads(line))
    except FileNotFoundError:
        pass
    return out


def _crc(model):
    """A checksum of the parameters' bytes (int64, for MIN and MAX allreduces)."""
    c = 0
    for p in model.parameters():
        c = zlib.crc32(memoryview(p.detach().numpy()).cast("B"), c)
    return c


def _trainer(cfg):
    """A training process of the elastic tests (forked). Exit status 0: trained cfg['steps']
    steps; 3: its run stopped with ringd.Closed; 1: anything else (traceback in the log)."""
    log = cfg["log"]
    torch.set_num_threads(1)
    hvd = ringd.torch
    code = 1
    try:
        hvd.init(socket=cfg["socket"], job=cfg["job"], world_size=2, local_size=1, min_size=1,
                 op_timeout_ms=60000)
        torch.manual_seed(7 + cfg["index"])  # every process starts elsewhere
        if cfg["model"] == "resnet18":
            model = torchvision.models.resnet18(num_classes=10)
            shape = (cfg["batch"], 3, 32, 32)
        else:
            model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                        torch.nn.Linear(64, 10))
            shape = (cfg["batch"], 32)
        base_lr = 0.01
        opt = hvd.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=base_lr * hvd.size(), momentum=0.9),
            named_parameters=model.named_parameters())
        state = hvd.elastic.TorchState(model, opt, step=0)

        def on_reset():
            for group in opt.param_groups:
                group["lr"] = base_lr * hvd.size()
            _log(log, ev="reset", size=hvd.size(), rank=hvd.rank(), gen=hvd.generation(),
                 step=state.step, lr=opt.param_groups[0]["lr"])

        state.register_reset_callbacks([on_reset])

        @hvd.elastic.run
        def train(state):
            while state.step < cfg["steps"]:
                r, n = hvd.rank(), hvd.size()
                g = torch.Generator().manual_seed(1000 * state.step + r)
                x = torch.randn(*shape, generator=g)
                y = torch.randint(0, 10, (cfg["batch"],), generator=g)
                opt.zero_grad()
                F.cross_entropy(model(x), y).backward()
                opt.step()
                crc = _crc(model)
                lo = hvd.allreduce(torch.tensor([crc]), name=f"crc.min.{state.step}", op=hvd.Min)
                hi = hvd.allreduce(torch.tensor([crc]), name=f"crc.max.{state.step}", op=hvd.Max)
                state.step += 1
                state.commit()
                _log(log, ev="step", rank=r, size=n, gen=hvd.generation(), step=state.step,
                     crc=crc, lo=int(lo.item()), hi=int(hi.item()),
                     lr=opt.param_groups[0]["lr"])
                time.sleep(cfg["pause"])
            return _crc(model)

        final = train(state)
        _log(log, ev="done", step=state.step, crc=final, size=hvd.size())
        code = 0
    except ringd.Closed as e:
        _log(log, ev="closed", why=str(e))
        code = 3
    except BaseException:
        _log(log, ev="error", why=traceback.format_exc())
    finally:
        try:
            hvd.shutdown()
        finally:
            os._exit(code)


class _Nodes:
    """A redis-server, daemons added one by one (n0, n1, ...), a trainer process on each."""

    def __init__(self, tmp_path, tag):
        self.tmp = tmp_path
        self.job = f"{tag}.{os.getpid()}"
        self.redis = conftest.Redis()
        key = tmp_path / "ring.key"
        key.write_text("python tests' ring key, 32 bytes")
        key.chmod(0o600)
        self.extra = ["--redis", self.redis.url, "--listen", "127.0.0.1:0", "--key-file",
                      str(key), "--lease-ttl", "1000"]
        self.daemons = []
        self.procs, self.logs = {}, {}  # node number -> its trainer, its trainer's log

    def start_daemon(self):
        """Starts node n<k> (a daemon without clients yet); returns k."""
        self.daemons.append(conftest.Daemon(self.extra + ["--node", f"n{len(self.daemons)}"]))
        return len(self.daemons) - 1

    def add(self, model, steps, batch, pause, k=None):
        """Starts a trainer on node n<k> (a new node when k is None); returns k."""
        if k is None:
            k = self.start_daemon()
        log = str(self.tmp / f"trainer-n{k}.log")
        cfg = {"socket": self.daemons[k].sock, "job": self.job, "index": k, "log": log,
               "model": model, "steps": steps, "batch": batch, "pause": pause}
        p = multiprocessing.get_context("fork").Process(target=_trainer, args=(cfg,),
                                                        daemon=True, name=f"trainer-n{k}")
        p.start()
        self.procs[k] = p
        self.logs[k] = log
        return k

    def evidence(self):
        parts = []
        for k, log in sorted(self.logs.items()):
            evs = _events(log)
            parts.append(f"---- trainer n{k} ({len(evs)} events) ----\n"
                         + "\n".join(json.dumps(e) for e in evs[-12:]))
        return "\n".join(parts) + "\n" + "\n".join(
            f"---- ringd n{k} ----\n{conftest.tail(d.log)}" for k, d in enumerate(self.daemons))

    def wait(self, cond, timeout, what):
        if not conftest.wait_for(cond, timeout, every=0.05):
            raise AssertionError(f"{what} (not within {timeout} s)\n{self.evidence()}")

    def steps(self, k):
        return [e for e in _events(self.logs[k]) if e["ev"] == "step"]

    def exit_code(self, k, timeout):
        self.procs[k].join(timeout)
        if self.procs[k].exitcode is None:
            raise AssertionError(f"trainer n{k} still runs after {timeout} s\n"
                                 f"{self.evidence()}")
        return self.procs[k].exitcode

    def close(self):
        """Kills what is left, stops the daemons (judging those that ran to the end)."""
        for p in self.procs.values():
            if p.is_alive():
                p.kill()
            p.join(5)
        problems = []
        for k, d in enumerate(self.daemons):
            alive = d.proc.poll() is None
            rc = d.stop()
            if alive and rc != 0:
                problems.append(f"ringd n{k} exit status {rc}:\n{conftest.tail(d.log, 6000)}")
            d.remove()
        self.redis.remove()
        return problems


@pytest.fixture
def nodes(tmp_path, request):
    n = _Nodes(tmp_path, request.node.name[:40])
    yield n
    problems = n.close()
    assert not problems, "daemons did not shut down cleanly:\n" + "\n".join(problems)


def _check_identical(all_steps, evidence):
    """Every step line's in-band check (the checksum allreduced with MIN and MAX) and every
    (generation, step) printed by several ranks agree."""
    by = {}
    for e in all_steps:
        assert e["lo"] == e["hi"] == e["crc"], (
            f"step {e['step']} generation {e['gen']}: rank {e['rank']} has checksum "
            f"{e['crc']}, the ranks range over {e['lo']}..{e['hi']}\n{evidence()}")
        by.setdefault((e["gen"], e["step"]), set()).add(e["crc"])
    split = {k: v for k, v in by.items() if len(v) > 1}
    assert not split, f"ranks disagree at (generation, step): {split}\n{evidence()}"


# A step of ResNet-18 takes about a second under the sanitizers (CPU, one thread).
STEPS = 12


@pytest.mark.skipif(torchvision is None, reason="python3-torchvision is not installed "
                    "(scripts/deps.sh installs it)")
def test_resnet18_keeps_identical_parameters_while_a_node_is_killed_and_one_joins(nodes):
    nodes.add("resnet18", STEPS, 2, 0)
    nodes.add("resnet18", STEPS, 2, 0)
    spare = nodes.start_daemon()  # the node that joins: its daemon up, its trainer not yet
    nodes.wait(lambda: all(len(nodes.steps(k)) >= 3 for k in (0, 1)), 120,
               "n0 and n1 did not both do 3 steps")
    nodes.daemons[1].kill()  # the node is gone: its daemon and its trainer
    nodes.procs[1].kill()
    killed_at = nodes.steps(0)[-1]["step"]
    nodes.wait(lambda: any(e["size"] == 1 for e in nodes.steps(0)), 60,
               "n0 did not go on alone after n1 was killed")
    nodes.add("resnet18", STEPS, 2, 0, k=spare)
    assert nodes.exit_code(0, 180) == 0, nodes.evidence()
    assert nodes.exit_code(2, 60) == 0, nodes.evidence()

    steps = [nodes.steps(k) for k in range(3)]
    _check_identical(steps[0] + steps[1] + steps[2], nodes.evidence)
    sizes0 = [e["size"] for e in steps[0]]
    assert sizes0[0] == 2 and 1 in sizes0 and sizes0[-1] == 2, (
        f"n0 trained at sizes {sizes0}: want 2, then 1 after the kill, then 2 after the join")
    assert steps[2] and steps[2][0]["step"] > killed_at, (
        f"the newcomer's first step is {steps[2][0]['step'] if steps[2] else None}: it did "
        f"not start from the others' state (n1 was killed after step {killed_at})")
    assert steps[2][-1]["step"] == STEPS and steps[0][-1]["step"] == STEPS
    # after the join both printed the same steps at size 2 (same checksums: checked above)
    together = ({(e["gen"], e["step"]) for e in steps[0] if e["size"] == 2}
                & {(e["gen"], e["step"]) for e in steps[2]})
    assert len(together) >= 3, f"n0 and the newcomer did {len(together)} steps together"
    done = [e for k in (0, 2) for e in _events(nodes.logs[k]) if e["ev"] == "done"]
    assert len(done) == 2 and done[0]["crc"] == done[1]["crc"], done
    # the reset callback fired on n0 at each change, with the learning rate rescaled
    resets = [e for e in _events(nodes.logs[0]) if e["ev"] == "reset"]
    sizes = [e["size"] for e in resets]
    assert 1 in sizes and sizes[-1] == 2 and sizes.index(1) < len(sizes) - 1, resets
    assert all(e["lr"] == pytest.approx(0.01 * e["size"]) for e in resets), resets
    assert all(e["lr"] == pytest.approx(0.01 * e["size"]) for s in steps for e in s)


def test_a_drained_node_stops_its_run_with_closed_and_the_other_goes_on(nodes):
    nodes.add("mlp", 100000, 8, 0.01)
    nodes.add("mlp", 100000, 8, 0.01)
    nodes.wait(lambda: all(len(nodes.steps(k)) >= 5 for k in (0, 1)), 120,
               "n0 and n1 did not both do 5 steps")
    # SIGTERM: the daemon drains (its clients' submitted ops finish), then leaves
    assert nodes.daemons[1].stop() == 0, nodes.evidence()
    assert nodes.exit_code(1, 60) == 3, nodes.evidence()
    ev1 = _events(nodes.logs[1])
    assert ev1[-1]["ev"] == "closed" and "CLOSED" in ev1[-1]["why"], ev1[-1]
    assert not [e for e in ev1 if e["ev"] == "reset"], "the drained node's run reset"
    # n0 resets to size 1 and trains on; its partner's last steps agreed with it
    nodes.wait(lambda: any(e["size"] == 1 for e in nodes.steps(0)), 60,
               "n0 did not go on alone after n1 was drained")
    resets = [e for e in _events(nodes.logs[0]) if e["ev"] == "reset"]
    assert resets and resets[-1]["size"] == 1, resets
    _check_identical(nodes.steps(0) + nodes.steps(1), nodes.evidence)
    nodes.procs[0].kill()
