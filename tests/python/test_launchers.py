"""Every launcher's processes read their own shard: torchrun, Lightning's own
DDP launch, SLURM and MPI environments, torch.distributed initialised by the
script; a partial environment is an error, never the whole dataset read
silently by every process."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import nostall
import warm
from conftest import free_port, write_jpeg_folder

HERE = Path(__file__).resolve().parent
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE",
               "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
               "PMI_RANK", "PMI_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_jpeg_folder(tmp_path_factory.mktemp("launchers"), classes=3, per_class=10, seed=6,
                             min_side=40, max_side=80)


@pytest.fixture
def clean_env(monkeypatch):
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def child_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def read_ranks(out):
    return sorted((json.loads(p.read_text()) for p in Path(out).glob("rank-*.json")),
                  key=lambda r: r["rank"])


def assert_each_sample_once_per_epoch(ranks, items=30):
    assert [(r["rank"], r["world_size"]) for r in ranks] == [(k, len(ranks)) for k in range(len(ranks))]
    for epoch in range(2):
        seen = [i for r in ranks for i in r["epochs"][epoch]]
        assert sorted(seen) == list(range(items)), f"epoch {epoch}"
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1]  # each epoch its own order


def run_all(procs, timeout=240):
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        assert p.returncode == 0, err
        outs.append(err)
    return outs


@pytest.mark.slow
def test_torchrun_with_torch_distributed_initialised(folder, tmp_path):
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                               "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                               str(HERE / "rank_epochs.py"), str(folder), str(tmp_path), "--init"],
                              env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)]
    (err,) = run_all(procs)
    assert_each_sample_once_per_epoch(read_ranks(tmp_path))
    assert "nostall: rank 1 of 2, from torch.distributed" in err


@pytest.mark.parametrize("launcher, variables", [
    ("torchrun's RANK and WORLD_SIZE", lambda r, n: {"RANK": r, "WORLD_SIZE": n, "LOCAL_RANK": r}),
    ("SLURM's", lambda r, n: {"SLURM_PROCID": r, "SLURM_NTASKS": n, "SLURM_LOCALID": r}),
    ("Open MPI's", lambda r, n: {"OMPI_COMM_WORLD_RANK": r, "OMPI_COMM_WORLD_SIZE": n}),
    ("MPI's PMI_RANK", lambda r, n: {"PMI_RANK": r, "PMI_SIZE": n}),
    ("Lightning's launcher", lambda r, n: {"LOCAL_RANK": r, "WORLD_SIZE": n, "NODE_RANK": 0}),
])
@pytest.mark.slow
def test_each_launchers_environment_gives_each_process_its_shard(folder, tmp_path, launcher,
                                                                  variables):
    # Three processes at once, each started as its launcher would (python
    # rank_epochs.py) with torch already imported (warm.py).
    procs = [warm.popen(HERE / "rank_epochs.py", [folder, tmp_path], env=child_env(**variables(r, 3)))
             for r in range(3)]
    errs = run_all(procs)
    ranks = read_ranks(tmp_path)
    assert_each_sample_once_per_epoch(ranks)
    for r, err in enumerate(errs):  # one line says which launcher's variables were read
        lines = [line for line in err.splitlines() if line.startswith("nostall: rank")]
        assert lines == [f"nostall: rank {r} of 3, from {lines[0].split('from ', 1)[1]}"], err
        assert launcher in lines[0]


@pytest.mark.parametrize("env, message", [
    ({"LOCAL_RANK": "1"}, "LOCAL_RANK='1' but no world size"),
    ({"SLURM_PROCID": "1"}, "SLURM_PROCID='1' but not SLURM_NTASKS"),
    ({"SLURM_NTASKS": "4"}, "SLURM_NTASKS='4' but not SLURM_PROCID"),
    ({"OMPI_COMM_WORLD_SIZE": "2"}, "not OMPI_COMM_WORLD_RANK"),
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "4"}, "SLURM_PROCID=5 is outside"),
    ({"LOCAL_RANK": "1", "WORLD_SIZE": "4", "NODE_RANK": "1"}, "LOCAL_WORLD_SIZE"),
])
def test_a_partial_launcher_environment_is_an_error_not_the_whole_dataset(folder, clean_env,
                                                                          env, message):
    for k, v in env.items():
        clean_env.setenv(k, v)
    with pytest.raises(ValueError, match=message):
        nostall.Loader(folder, batch_size=4)
    with pytest.raises(ValueError, match=message):
        nostall.Loader.from_spec({"source": str(folder), "batch_size": 4})
    assert nostall.Loader(folder, batch_size=4, rank=0, world_size=1).samples_per_epoch == 30


def test_lightning_on_several_nodes_with_local_world_size(folder, clean_env):
    for k, v in {"LOCAL_RANK": "1", "WORLD_SIZE": "4", "NODE_RANK": "1",
                 "LOCAL_WORLD_SIZE": "2"}.items():
        clean_env.setenv(k, v)
    loader = nostall.Loader(folder, batch_size=4)
    assert (loader.spec["rank"], loader.spec["world_size"]) == (3, 4)


@pytest.mark.slow
def test_lightning_ddp_launch_trains_and_validates_each_sample_once(folder, tmp_path):
    lightning = pytest.importorskip("lightning")  # noqa: F841  (installed by make test)
    val = write_jpeg_folder(tmp_path / "val", classes=3, per_class=7, seed=8, min_side=40,
                            max_side=80)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([sys.executable, str(HERE / "lightning_ddp.py"), str(folder), str(val),
                           str(out)], env=child_env(MASTER_ADDR="127.0.0.1",
                                                    MASTER_PORT=free_port()),
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["train_shard"] for r in ranks] == [[0, 2], [1, 2]]
    assert [r["val_shard"] for r in ranks] == [[0, 2], [1, 2]]
    for epoch in range(2):
        trained = [i for r in ranks for e, idx in r["trained"] if e == epoch for i in idx]
        assert sorted(trained) == list(range(30)), f"epoch {epoch}: each sample once over the ranks"
        validated = [i for r in ranks for e, idx in r["validated"] if e == epoch for i in idx]
        assert sorted(validated) == list(range(21)), f"epoch {epoch}: 21 samples, none twice"
    assert "nostall: rank 1 of 2" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("resume_at", [2, 3])
def test_torchrun_saved_at_four_resumes_at_another_number_of_ranks(folder, tmp_path, resume_at):
    """Elastic resume under torchrun: 4 processes read 3 batches each and rank 0
    saves; a job of `resume_at` processes loads that state: every sample the 4
    had not read comes once, none of theirs again, every rank as many batches."""
    def torchrun(n, mode):
        return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(n),
                                 "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                                 str(HERE / "elastic_rank.py"), str(folder), str(tmp_path), mode],
                                env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_all([torchrun(4, "save")])
    before = [i for r in range(4) for i in json.loads((tmp_path / f"save-{r}-of-4.json").read_text())]
    run_all([torchrun(resume_at, "resume")])
    after = [json.loads((tmp_path / f"resume-{r}-of-{resume_at}.json").read_text()) for r in range(resume_at)]
    assert len({a["batches"] for a in after}) == 1
    rest = [i for a in after for i in a["read"]]
    assert len(before) == 4 * 3 * 2 and not set(before) & set(rest)
    assert set(before) | set(rest) == set(range(30))
    assert len(rest) - len(set(rest)) < resume_at  # only the padding to equal counts repeats

