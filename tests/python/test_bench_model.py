"""ringd-bench --model: the built-in gradient sets match the real models, model files are checked,
and one step's gradients go through real daemons (one node, and two through a redis-server) with
every result checked."""
import os
import re
import subprocess

import pytest

from conftest import Daemon, Redis, _binary, tail


def bench(*args, timeout=120):
    return subprocess.run([_binary("RINGD_BENCH_BIN"), *args], capture_output=True, text=True,
                          timeout=timeout)


def listed(model):
    r = bench("--model", model, "--list")
    assert r.returncode == 0, r.stderr
    return [(name, int(count)) for name, count in (line.split() for line in r.stdout.splitlines())]


def summary(text):
    m = re.search(r"^# model (\S+): tensors (\d+) bytes (\d+) step_ms ([0-9.]+) ring_passes (\S+) "
                  r"ops_per_pass (\S+)$", text, re.M)
    assert m, f"no summary line in:\n{text}"
    return m.groups()


def test_resnet50_is_torchvisions_resnet50_parameter_for_parameter():
    torchvision = pytest.importorskip("torchvision")
    want = [(n, p.numel()) for n, p in torchvision.models.resnet50().named_parameters()]
    assert listed("resnet50") == want


def test_bert_base_has_the_published_size():
    tensors = listed("bert-base")
    assert len(tensors) == 199
    assert sum(c for _, c in tensors) == 109_482_240
    d = dict(tensors)
    assert d["embeddings.word_embeddings.weight"] == 30522 * 768
    assert d["encoder.layer.11.intermediate.dense.weight"] == 3072 * 768
    assert tensors[-1] == ("pooler.dense.bias", 768)


@pytest.mark.parametrize("text, why", [
    ("a 10\nb\n", r":2: expected \"name count\""),
    ("a 10\nb -3\n", r":2: expected \"name count\""),
    ("a 0\n", r":1: expected \"name count\""),
    ("a 10 extra\n", r":1: expected \"name count\""),
    ("a 10\na 20\n", r"tensor a is listed twice"),
    ("# only a comment\n\n", r"no tensors"),
    ("x" * 300 + " 4\n", r":1: tensor name longer than 200 bytes"),
])
def test_a_bad_model_file_is_refused_naming_the_line(tmp_path, text, why):
    f = tmp_path / "m.txt"
    f.write_text(text)
    r = bench("--model", str(f), "--list")
    assert r.returncode == 2
    assert re.search(why, r.stderr), r.stderr
    assert r.stdout == ""


def test_an_unknown_model_names_the_built_in_ones():
    r = bench("--model", "resnet51", "--list")
    assert r.returncode == 2
    assert "resnet50|bert-base" in r.stderr


def small_model(tmp_path):
    """Tensors around the direct, ring and fusion sizes, with comments and blank lines."""
    f = tmp_path / "small"
    f.write_text("# a comment\n\nbias 3\nweight 70000 # trailing comment\nemb 1000003\n"
                 "norm 512\nhead 5000\n")
    return str(f), 3 + 70000 + 1000003 + 512 + 5000


def test_a_model_step_on_one_node_checks_every_gradient(daemon, tmp_path):
    path, elems = small_model(tmp_path)
    r = bench("--socket", daemon.sock, "--procs", "2", "--model", path, "--gap-us", "50",
              "-n", "3", "-w", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    name, tensors, nbytes, step_ms, passes, _ = summary(r.stdout)
    assert (name, tensors, nbytes, passes) == ("small", "5", str(4 * elems), "0")
    assert float(step_ms) > 0
    assert "# #wrong 0" in r.stdout


def test_a_model_step_across_two_nodes_fuses_and_checks_every_gradient(tmp_path):
    key = tmp_path / "ring.key"
    key.write_text("python tests' ring key, 32 bytes")
    os.chmod(key, 0o600)
    redis, daemons, other = Redis(), [], None
    try:
        for i in range(2):  # each starts as it is made
            daemons.append(Daemon(["--redis", redis.url, "--listen", "127.0.0.1:0", "--key-file",
                                   str(key), "--node", f"n{i}"]))
        path, elems = small_model(tmp_path)
        args = ["--procs", "1", "--world", "2", "--job", "model-test", "--model", path,
                "-n", "3", "-w", "1"]
        other = subprocess.Popen([_binary("RINGD_BENCH_BIN"), "--socket", daemons[1].sock, *args],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        r = bench("--socket", daemons[0].sock, *args)
        out1, err1 = other.communicate(timeout=120)
        logs = "\n".join(tail(d.log) for d in daemons)
        assert r.returncode == 0 and other.returncode == 0, r.stdout + r.stderr + err1 + logs
        assert out1 == "", "rank 1 printed a summary"
        name, tensors, nbytes, _, passes, per_pass = summary(r.stdout)
        assert (name, tensors, nbytes) == ("small", "5", str(4 * elems))
        # bias and norm travel directly; weight, emb and head take ring passes, fused or not
        assert 1 <= float(passes) <= 3, r.stdout
        assert float(per_pass) >= 1
        assert "# #wrong 0" in r.stdout
    finally:
        if other is not None and other.poll() is None:
            other.kill()
            other.wait()
        for d in daemons:
            d.stop()
            d.remove()
        redis.stop()
        redis.remove()
