"""`bench sweep --launcher slurm` against a real Slurm: one node, started by the fixture (munged, slurmctld, slurmd
from Debian's `slurm-wlm` and `munge`, `apt-get install slurmctld slurmd slurm-client munge`), a slurm.conf of its
own in a temporary folder. Opt-in: it skips, saying why, where those programs are missing or the daemons do not come
up (they need root). The cells answer from the loopback server of test_sweep.py, so the test takes seconds."""
import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from test_cli import bench
from test_sweep import Answers, grid_file, records

pytest.importorskip("submitit")
pytestmark = pytest.mark.slow

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo")

CONF = """ClusterName=benchtest
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
NodeName={host} CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NoSlurm(Exception):
    """Why no one-node Slurm can run here."""


@contextlib.contextmanager
def one_node_slurm(root: Path):
    """munged (unless the machine runs one), slurmctld and slurmd on this node, with a slurm.conf in `root`; yields
    the environment whose SLURM_CONF the clients (sbatch, squeue, sacct) read. Raises NoSlurm, saying why."""
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    if missing:
        raise NoSlurm(f"no Slurm here ({', '.join(missing)} missing): apt-get install slurmctld slurmd slurm-client "
                      "munge")
    if os.geteuid() != 0:
        raise NoSlurm("the fixture's slurmd and munged run as root")
    if not Path("/etc/munge/munge.key").is_file():
        raise NoSlurm("no munge key at /etc/munge/munge.key (the munge package's install makes one)")
    for sub in ("state", "spool"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    host = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text(CONF.format(host=host, root=root, cpus=os.cpu_count() or 1, ctld_port=free_port(),
                                d_port=free_port()))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    procs = []
    try:
        socket_path = Path("/run/munge/munge.socket.2")
        if not socket_path.exists():  # a munged of the machine's own serves slurm too
            socket_path.parent.mkdir(parents=True, exist_ok=True)
            procs.append(subprocess.Popen(["munged", "--foreground", "--force"], stdout=subprocess.DEVNULL,
                                          stderr=open(root / "munged.log", "w")))
            for _ in range(50):
                if socket_path.exists():
                    break
                time.sleep(0.1)
        procs.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(conf)], env=env, stdout=subprocess.DEVNULL,
                                      stderr=open(root / "slurmctld.err", "w")))
        procs.append(subprocess.Popen(["slurmd", "-D", "-f", str(conf)], env=env, stdout=subprocess.DEVNULL,
                                      stderr=open(root / "slurmd.err", "w")))
        for _ in range(100):
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True)
            if state.returncode == 0 and state.stdout.strip() in ("idle", "mixed"):
                break
            time.sleep(0.3)
        else:
            logs = "".join((root / n).read_text()[-800:] for n in ("slurmctld.err", "slurmd.err")
                           if (root / n).exists())
            raise NoSlurm(f"the one-node Slurm did not come up: {logs[-600:]}")
        yield env
        for _ in range(200):  # a job's last step still reports to the daemons after its result is written
            queue = subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True)
            if queue.returncode != 0 or not queue.stdout.strip():
                break
            time.sleep(0.3)
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    try:
        with one_node_slurm(tmp_path_factory.mktemp("slurm")) as env:
            yield env
    except NoSlurm as why:
        pytest.skip(str(why))


def test_a_sweep_on_slurm_runs_one_job_array_with_the_records_of_the_local_launcher(slurm, tmp_path):
    server = Answers()
    try:
        grid = grid_file(tmp_path, server.url)
        on_slurm = bench("sweep", str(grid), "--out", str(tmp_path / "slurm"), "--launcher", "slurm", "--cpus", "1",
                         "--time", "10", "--array-parallelism", "2", env=slurm, timeout=600)
        assert on_slurm.returncode == 0, on_slurm.stderr[-3000:]
        ids = {line.split("job ")[1].split(" ")[0] for line in on_slurm.stderr.splitlines() if ": job " in line}
        assert len(ids) == 4 and len({i.split("_")[0] for i in ids}) == 1  # one array, a task per cell
        local = bench("sweep", str(grid), "--out", str(tmp_path / "local"), "--workers", "2", timeout=600)
        assert local.returncode == 0, local.stderr[-3000:]
        for cell in sorted((tmp_path / "slurm" / "cells").iterdir()):
            assert records(cell) == records(tmp_path / "local" / "cells" / cell.name), cell.name
        again = bench("sweep", str(grid), "--out", str(tmp_path / "slurm"), "--launcher", "slurm", env=slurm)
        assert again.returncode == 0 and "4/4 done (4 finished before)" in again.stderr
    finally:
        server.close()
